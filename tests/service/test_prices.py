"""Refreshing cloud prices (admin): checked against the knowledge, kept whole or not at
all, and used by the running service (offers, recommendations) without a restart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service import create_app
from service.infra.keys import KeyFile
from tests.conftest import KEYS_FILE, WRITE_KEY, with_key
from tests.service.helpers import fields_in, get_json, problem

HEADER = (
    "provider,instance_type,region,on_demand_usd_per_hour,spot_usd_per_hour,"
    "reserved_usd_per_hour,catalog_date,source\n"
)
ADMIN, _ = KeyFile(KEYS_FILE).create("price-admin", "admin")


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return create_app({"TESTING": True, "PRICES_FILE": str(tmp_path / "prices.csv")})


def _an_offer(client: FlaskClient) -> dict[str, object]:
    offer: dict[str, object] = get_json(client, "/v1/offers?provider=aws&page_size=1")["items"][0]
    return offer


def _put(client: FlaskClient, text: str, token: str = ADMIN):  # type: ignore[no-untyped-def]
    with_key(client, token)
    return client.put("/v1/offers/prices", data=text.encode(), content_type="text/csv")


def test_a_refresh_reaches_the_offers_without_a_restart(app: Flask, client: FlaskClient) -> None:
    offer = _an_offer(client)
    row = (
        f"aws,{offer['instance_type']},{offer['cheapest_region']},0.01,,,2026-12-01,test catalog\n"
    )
    response = _put(client, HEADER + row)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["rows"] == 1
    app.extensions["rightsize"].layers.load_now()
    found = get_json(client, "/v1/offers?provider=aws&page_size=500")["items"]
    same = [o for o in found if o["instance_type"] == offer["instance_type"]]
    assert same[0]["on_demand_usd_per_hour"] == 0.01  # the new price, cheapest now
    assert get_json(client, "/v1/offers?provider=aws&page_size=1")["items"][0] == same[0]
    assert get_json(client, "/v1/offers?page_size=1")["knowledge_version"].count("+p") == 1


def test_a_bad_row_rejects_the_catalog_and_changes_nothing(app: Flask, client: FlaskClient) -> None:
    offer = _an_offer(client)
    good = (
        f"aws,{offer['instance_type']},{offer['cheapest_region']},0.01,,,2026-12-01,test catalog\n"
    )
    bad = "aws,p99.nothing,us-east-1,1.0,,,2026-12-01,test catalog\n"
    negative = f"aws,{offer['instance_type']},eu-west-1,-4,,,2026-12-01,test catalog\n"
    body = problem(_put(client, HEADER + good + bad + negative), 422)
    assert {"rows.1.instance_type", "rows.2.on_demand_usd_per_hour"} <= fields_in(body)
    assert "nothing was changed" in body["detail"]
    assert not app.extensions["rightsize"].prices.path.exists()
    assert _an_offer(client) == offer


def test_only_an_admin_refreshes_and_only_csv(app: Flask, client: FlaskClient) -> None:
    problem(_put(client, HEADER, token=WRITE_KEY), 403)
    response = with_key(client, ADMIN).put("/v1/offers/prices", json={"rows": []})
    problem(response, 415)
    problem(_put(client, HEADER), 422)  # a header and no rows
    assert not app.extensions["rightsize"].prices.path.exists()


@pytest.mark.slow  # a subprocess
def test_the_command_line_refresh(tmp_path: Path) -> None:
    app = create_app({"TESTING": True})
    offer = _an_offer(app.test_client())
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        HEADER + f"aws,{offer['instance_type']},{offer['cheapest_region']},0.02,,,2026-12-01,cli\n"
    )
    env = {"RIGHTSIZE_PRICES_FILE": str(tmp_path / "prices.csv"), "PATH": "/usr/bin:/bin"}
    rightsize = str(Path(sys.executable).with_name("rightsize"))
    done = subprocess.run(
        [rightsize, "prices", "refresh", str(catalog)], env=env, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "prices.csv").read_text() == catalog.read_text()
    catalog.write_text(HEADER + "aws,nope,x,1,,,2026-12-01,cli\n")
    refused = subprocess.run(
        [rightsize, "prices", "refresh", str(catalog)], env=env, capture_output=True, check=False
    )
    assert refused.returncode != 0
    assert b"nothing was changed" in refused.stderr
    assert "0.02" in (tmp_path / "prices.csv").read_text()


def test_a_quiet_service_switches_by_itself(tmp_path: Path) -> None:
    import time

    app = create_app({"TESTING": True, "PRICES_FILE": str(tmp_path / "prices.csv")})
    layers = app.extensions["rightsize"].layers
    before = layers.service().knowledge.version
    offer = _an_offer(app.test_client())
    where = f"aws,{offer['instance_type']},{offer['cheapest_region']}"
    app.extensions["rightsize"].prices.refresh(
        app.extensions["rightsize"].knowledge, HEADER + f"{where},0.03,,,2026-12-01,test\n", "test"
    )
    layers.watch(interval_s=0.05)
    deadline = time.monotonic() + 60
    while layers._loaded.everything.knowledge.version == before:  # no request asks
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert "+p" in layers._loaded.everything.knowledge.version


def test_a_spreadsheets_csv_is_taken_and_formula_cells_are_refused(
    app: Flask, client: FlaskClient
) -> None:
    """Excel's "CSV UTF-8" starts with a byte-order mark; a cell such as =HYPERLINK(...)
    would run as a formula when an operator opens the stored file (issue 26)."""
    offer = _an_offer(client)
    row = f"aws,{offer['instance_type']},{offer['cheapest_region']},0.03,,,2026-12-01,"
    formula = _put(client, HEADER + row + '"=HYPERLINK(""http://x"",""y"")"\n')
    assert fields_in(problem(formula, 422)) == {"rows.0.source"}
    assert not app.extensions["rightsize"].prices.path.exists()
    with_key(client, ADMIN)
    bom = client.put(
        "/v1/offers/prices",
        data=b"\xef\xbb\xbf" + (HEADER + row + "sheet\n").encode(),
        content_type="text/csv",
    )
    assert bom.status_code == 200, bom.get_data(as_text=True)


FULL_DISK = """
import resource, sys
from pathlib import Path
from service.infra.files import StoreFull, write_all_atomically
first, second = Path(sys.argv[1]), Path(sys.argv[2])
first.write_text("old"), second.write_text("old")
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
try:
    write_all_atomically({first: "new", second: "x" * 5000})
except StoreFull as exc:
    print("refused:", exc)
print(first.read_text(), second.read_text(), sorted(p.name for p in first.parent.iterdir()))
"""


def test_files_written_together_change_together_or_not_at_all(tmp_path: Path) -> None:
    """The prices and who refreshed them: a full disk leaves both as they were."""
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path / "a.csv"), str(tmp_path / "a.meta")],
        capture_output=True,
        text=True,
        check=True,
    )
    refused, kept = done.stdout.strip().splitlines()
    assert refused.startswith("refused:")
    assert kept == "old old ['a.csv', 'a.meta']"
