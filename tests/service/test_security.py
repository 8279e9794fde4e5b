"""API keys and roles, rate limits, request ids, headers, CORS and metrics, on the real app
(and, for the shared limits, a real Redis)."""

from __future__ import annotations

import io
import json
import logging
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from service import create_app
from service.cli import main
from service.config import ConfigError, load_settings
from service.infra.keys import KeyFile
from service.security import JsonFormatter
from tests.conftest import KEYS_FILE, WRITE_KEY, with_key
from tests.profiles.trace_factory import known_steps
from tests.service.helpers import problem

KEYS = KeyFile(KEYS_FILE)
READ_KEY, _ = KEYS.create("security-tests-reader", "read")


def _upload(client: FlaskClient) -> object:
    return client.post(
        "/v1/traces",
        data={"file": (io.BytesIO(known_steps(3).gzipped()), "t.json.gz")},
        content_type="multipart/form-data",
    )


def _stored(client: FlaskClient) -> int:
    """Entries in the app's in-process cache, where traces are kept."""
    return int(client.application.extensions["rightsize"].cache.health()["items"])


class TestKeys:
    def test_an_upload_without_a_key_is_401_and_stores_nothing(self, anonymous: FlaskClient):
        before = _stored(anonymous)
        body = problem(_upload(anonymous), 401)
        assert "write role" in body["detail"]
        assert "rightsize keys create --role write" in body["detail"]
        assert _upload(anonymous).headers["WWW-Authenticate"].startswith("Bearer")
        assert _stored(anonymous) == before

    @pytest.mark.parametrize(
        "header",
        [
            f"Bearer {WRITE_KEY[:-4]}abcd",  # forged: right shape, wrong secret
            "Bearer rs_00000000_nothing",
            "Basic dXNlcjpwYXNz",  # the wrong scheme
            "Bearer ",
        ],
        ids=["forged", "unknown", "basic", "empty"],
    )
    def test_a_forged_or_malformed_key_is_401(self, anonymous: FlaskClient, header: str):
        before = _stored(anonymous)
        response = anonymous.post(
            "/v1/traces",
            data=known_steps(3).gzipped(),
            content_type="application/gzip",
            headers={"Authorization": header},
        )
        problem(response, 401)
        assert _stored(anonymous) == before
        # a wrong key is refused on reads too, so that its holder finds out
        problem(anonymous.get("/v1/gpus", headers={"Authorization": header}), 401)

    def test_a_read_key_may_not_write(self, app: Flask):
        reader = with_key(app.test_client(), READ_KEY)
        body = problem(_upload(reader), 403)
        assert "read role" in body["detail"]
        assert reader.get("/v1/gpus").status_code == 200

    def test_a_write_key_writes_and_a_revoked_one_stops_at_once(self, app: Flask):
        token, record = KEYS.create("soon-revoked", "write")
        writer = with_key(app.test_client(), token)
        assert _upload(writer).status_code == 201
        assert KEYS.revoke(record.key_id)
        problem(_upload(writer), 401)  # the same app, no restart

    def test_reads_can_be_made_to_need_a_key(self):
        app = create_app({"TESTING": True, "REQUIRE_READ_KEY": True})
        anonymous = app.test_client()
        assert "read role" in problem(anonymous.get("/v1/gpus"), 401)["detail"]
        problem(anonymous.post("/v1/tco", json={}), 401)
        assert with_key(app.test_client(), READ_KEY).get("/v1/gpus").status_code == 200
        assert anonymous.get("/healthz").status_code == 200  # probes stay open
        assert anonymous.get("/openapi.json").status_code == 200

    def test_keys_are_never_logged(self, app: Flask, caplog: pytest.LogCaptureFixture):
        token, record = KEYS.create("logged", "write")
        with caplog.at_level(logging.INFO):
            _upload(with_key(app.test_client(), token))
            app.test_client().get("/v1/gpus", headers={"Authorization": f"Bearer {token}x"})
        text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
        assert token not in text
        assert record.key_id in text  # the public id names the caller

    def test_the_write_route_is_documented_as_needing_a_key(self, client: FlaskClient):
        spec = client.get("/openapi.json").get_json()
        assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
        upload = spec["paths"]["/v1/traces"]["post"]
        assert upload["security"] == [{"bearerAuth": []}]
        assert {"401", "403"} <= set(upload["responses"])


class TestKeyCommands:
    def test_create_list_revoke(self, tmp_path: Path):
        path = tmp_path / "keys.json"
        env = {"RIGHTSIZE_KEYS_FILE": str(path)}
        made = CliRunner().invoke(main, ["keys", "create", "--name", "bot", "--role", "write"],
                                  env=env)  # fmt: skip
        assert made.exit_code == 0, made.output
        token = made.output.strip().splitlines()[-1]
        assert token.startswith("rs_")
        assert token not in path.read_text()  # only its hash is kept
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        key = KeyFile(path).find(token)
        assert key is not None
        assert key.role == "write"
        listed = CliRunner().invoke(main, ["keys", "list"], env=env)
        assert key.key_id in listed.output
        assert "bot" in listed.output
        assert token not in listed.output
        bad = CliRunner().invoke(main, ["keys", "create", "--name", "x", "--role", "root"],
                                 env=env)  # fmt: skip
        assert bad.exit_code == 2
        gone = CliRunner().invoke(main, ["keys", "revoke", key.key_id], env=env)
        assert gone.exit_code == 0
        assert KeyFile(path).find(token) is None
        again = CliRunner().invoke(main, ["keys", "revoke", key.key_id], env=env)
        assert again.exit_code == 1
        assert "no key" in again.output


class TestRateLimits:
    def test_beyond_the_limit_is_429_with_retry_after_per_client(self):
        app = create_app({"TESTING": True, "RATE_LIMIT": "3 per minute"})
        one = app.test_client()
        for _ in range(3):
            fine = one.get("/v1/gpus?page_size=1")
            assert fine.status_code == 200
            assert "Retry-After" not in fine.headers  # only on a refusal
        response = one.get("/v1/gpus?page_size=1")
        body = problem(response, 429)
        assert int(response.headers["Retry-After"]) > 0
        assert body["status"] == 429
        other = app.test_client()
        other.environ_base["REMOTE_ADDR"] = "10.0.0.9"  # another address has its own count
        assert other.get("/v1/gpus?page_size=1").status_code == 200
        # a key is counted apart from its address
        assert with_key(app.test_client(), READ_KEY).get("/v1/gpus?page_size=1").status_code == 200
        assert one.get("/healthz").status_code == 200  # probes are not limited

    def test_behind_a_proxy_each_forwarded_client_counts_apart(self):
        """Behind a balancer every request comes from its address: with
        RIGHTSIZE_PROXY_HOPS the address it forwards is the client (and only that many
        hops are believed: a client's own X-Forwarded-For entries are not)."""
        for hops, separate in ((0, False), (1, True)):
            app = create_app({"TESTING": True, "RATE_LIMIT": "2 per minute", "PROXY_HOPS": hops})
            statuses = []
            for forwarded in ("198.51.100.1", "198.51.100.2", "198.51.100.3"):
                client = app.test_client()
                client.environ_base["HTTP_X_FORWARDED_FOR"] = f"203.0.113.66, {forwarded}"
                statuses.append(client.get("/v1/gpus?page_size=1").status_code)
            assert statuses == ([200, 200, 200] if separate else [200, 200, 429])

    def test_replicas_share_their_counts_in_redis(self, redis_url: str, redis_prefix: str):
        config = {"REDIS_URL": redis_url, "KEY_PREFIX": redis_prefix, "RATE_LIMIT": "4/minute"}
        first, second = create_app(config).test_client(), create_app(config).test_client()
        for client in (first, second, first, second):
            assert client.get("/v1/gpus?page_size=1").status_code == 200
        problem(first.get("/v1/gpus?page_size=1"), 429)
        problem(second.get("/v1/gpus?page_size=1"), 429)

    @pytest.mark.parametrize(
        ("name", "value"),
        [("RATE_LIMIT", "lots"), ("CORS_ORIGINS", "example.com"), ("REQUIRE_READ_KEY", "maybe")],
    )
    def test_bad_settings_refuse_to_start_naming_the_key(self, name: str, value: str):
        with pytest.raises(ConfigError, match=f"RIGHTSIZE_{name}"):
            load_settings(environ={f"RIGHTSIZE_{name}": value})


class TestRequestsAndHeaders:
    def test_the_request_id_is_echoed_or_made(self, client: FlaskClient):
        given = client.get("/v1/gpus?page_size=1", headers={"X-Request-ID": "abc-123.x"})
        assert given.headers["X-Request-ID"] == "abc-123.x"
        made = client.get("/v1/gpus?page_size=1", headers={"X-Request-ID": "no spaces <allowed>"})
        assert len(made.headers["X-Request-ID"]) == 32
        assert made.headers["X-Request-ID"] != "no spaces <allowed>"
        assert client.get("/v1/gpus/nope").headers["X-Request-ID"]  # errors too

    def test_every_request_is_logged_as_json_with_its_id(
        self, client: FlaskClient, caplog: pytest.LogCaptureFixture
    ):
        with caplog.at_level(logging.INFO, logger="rightsize.access"):
            client.get("/v1/gpus?page_size=1", headers={"X-Request-ID": "trace-me"})
        (record,) = [r for r in caplog.records if getattr(r, "request_id", None) == "trace-me"]
        line = json.loads(JsonFormatter().format(record))
        assert line["status"] == 200
        assert line["path"] == "/v1/gpus"
        assert line["method"] == "GET"
        assert line["duration_ms"] >= 0
        assert line["level"] == "INFO"

    def test_security_headers_on_pages_and_answers(self, client: FlaskClient):
        docs = client.get("/docs")
        assert docs.status_code == 200
        assert "frame-ancestors 'none'" in docs.headers["Content-Security-Policy"]
        assert "script-src 'self'" in docs.headers["Content-Security-Policy"]
        answer = client.get("/v1/gpus?page_size=1")
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["Content-Security-Policy"].startswith("default-src 'none'")

    def test_cors_is_off_unless_origins_are_given(self, client: FlaskClient):
        origin = {"Origin": "https://procurement.example.com"}
        assert "Access-Control-Allow-Origin" not in client.get("/v1/gpus", headers=origin).headers
        app = create_app({"TESTING": True, "CORS_ORIGINS": ("https://procurement.example.com",)})
        allowed = app.test_client().get("/v1/gpus?page_size=1", headers=origin)
        assert allowed.headers["Access-Control-Allow-Origin"] == origin["Origin"]
        other = app.test_client().get("/v1/gpus", headers={"Origin": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in other.headers
        # the answer depends on the Origin: a shared cache must not serve one origin's to
        # another (issue 26)
        for response in (allowed, other, app.test_client().get("/v1/gpus?page_size=1")):
            assert "Origin" in response.headers["Vary"]


class TestMetrics:
    def test_requests_latency_cache_and_profiles_are_counted(self, client: FlaskClient):
        body = {"model": {"name": "gpt2"},
                "workload": {"task": "training", "batch_size": 2, "seq_len": 128,
                             "precision": "bf16"}}  # fmt: skip
        assert client.post("/v1/profiles", json=body).status_code in (200, 201)
        assert client.post("/v1/profiles", json=body).status_code in (200, 201)
        client.get("/v1/gpus/nope")
        text = client.get("/metrics").get_data(as_text=True)
        assert client.get("/metrics").mimetype == "text/plain"
        assert 'rightsize_requests_total{endpoint="/v1/profiles",method="POST",status=' in text
        assert 'rightsize_requests_total{endpoint="/v1/gpus/<string:gpu_id>",method="GET",' \
               'status="404"} 1.0' in text  # fmt: skip
        assert 'rightsize_cache_lookups_total{kind="profile",result="hit"}' in text
        assert 'rightsize_cache_lookups_total{kind="profile",result="miss"}' in text
        assert "rightsize_profile_seconds_count 1.0" in text
        assert 'rightsize_request_duration_seconds_bucket{endpoint="/v1/profiles"' in text
