"""The web page at ``/``: served as HTML with same-origin assets only, and driven in headless
Chromium over real HTTP (the ``live_server`` fixture): a catalog model, a pasted config.json
and a trace each answered, charted, shared and exported; an API error shown by its field.

Full-page screenshots of each answer go to ``tests/artifacts/`` (ignored by git);
``web-page.png`` there is the README's screenshot (``docs/web-page.png``), 1280 wide.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Error,
    Page,
    Route,
    expect,
    sync_playwright,
)

from tests.conftest import WRITE_KEY

pytestmark = pytest.mark.slow  # a browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
STATIC = ROOT / "service" / "web" / "static"
TRACE = ROOT / "tests" / "profiles" / "fixtures" / "traces" / "h200-resnet50-fp16-b256.json.gz"
# scripts/test installs Debian's chromium where it is missing (no browser download)
CHROMIUM = os.environ.get("RIGHTSIZE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ANSWER_MS = 30_000
WIDTH = 1280
# GPT-2 small as Hugging Face publishes it (the keys profiles/hf_config.py reads, and more)
GPT2_CONFIG = """{
  "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
  "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": null, "n_positions": 1024,
  "n_ctx": 1024, "vocab_size": 50257, "layer_norm_epsilon": 1e-05, "tie_word_embeddings": true
}"""
# each chart's id and the mark it must hold when drawn
CHART_MARKS = {
    "time-cost": "circle.point",
    "memory": "rect.bar",
    "step": "rect.bar",
    "trace": "rect.bar",
    "tco": "path.line",
}


class Assets(HTMLParser):
    """The addresses of a page's scripts, stylesheets and images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        for name in ("src", "href"):
            if tag in ("script", "link", "img") and found.get(name):
                self.urls.append(str(found[name]))


class TestServed:
    def test_the_page_is_html_with_same_origin_assets(self, client: FlaskClient) -> None:
        response = client.get("/")
        assert response.status_code == 200
        assert response.mimetype == "text/html"
        assert "default-src 'self'" in response.headers["Content-Security-Policy"]
        parser = Assets()
        parser.feed(response.get_data(as_text=True))
        assert parser.urls, "the page loads no script or stylesheet"
        for url in parser.urls:
            assert not re.match(r"^(https?:)?//", url), f"{url} is not same-origin"
            if not url.startswith("data:"):
                with client.get(url) as asset:
                    assert asset.status_code == 200, url

    def test_every_module_is_served_and_imports_only_its_neighbours(
        self, client: FlaskClient
    ) -> None:
        modules = sorted(STATIC.glob("*.js"))
        assert modules
        for module in modules:
            with client.get(f"/static/{module.name}") as answer:
                assert answer.status_code == 200
                assert "javascript" in answer.mimetype
            for imported in re.findall(r'from "([^"]+)"', module.read_text(encoding="utf-8")):
                assert imported.startswith("./"), f"{module.name} imports {imported}"
                assert (module.parent / imported).is_file()

    def test_the_page_stays_out_of_the_api_contract(self, client: FlaskClient) -> None:
        paths = client.get("/openapi.json").get_json()["paths"]
        assert "/" not in paths
        assert not any(p.startswith("/static") for p in paths)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module (it takes seconds to start)."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, live_server: str) -> Iterator[Page]:
    """A fresh tab on the live app; a script error in the page, or anything its content
    security policy blocks, fails the test."""
    context = browser.new_context(base_url=live_server, viewport={"width": WIDTH, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(ANSWER_MS)
    errors: list[Error] = []
    refused: list[str] = []

    def seen(error: Error) -> None:  # playwright wraps handlers: a bound builtin will not do
        errors.append(error)

    def logged(message: ConsoleMessage) -> None:  # what the security policy blocked
        if message.type == "error" and "Content Security Policy" in message.text:
            refused.append(message.text)

    opened.on("pageerror", seen)
    opened.on("console", logged)
    yield opened
    context.close()
    assert not errors, f"script errors in the page: {errors}"
    assert not refused, f"blocked by the page's policy: {refused}"


class Driver:
    """The sequences a person goes through on the page."""

    def __init__(self, page: Page) -> None:
        self.page = page

    def open(self, path: str = "/") -> None:
        self.page.goto(path)
        expect(self.page.get_by_role("button", name="Recommend")).to_be_enabled()

    def catalog_model(self, typed: str, name: str) -> None:
        """Type part of a name, wait for the search to offer ``name``, then choose it."""
        field = self.page.get_by_label("Model name")
        field.press_sequentially(typed, delay=40)
        option = self.page.locator(f'#model-list option[value="{name}"]')
        expect(option).to_be_attached()
        field.fill(name)

    def workload(self, task: str, **values: str) -> None:
        self.page.get_by_label("Task").select_option(task)
        labels = {
            "batch": "Batch size",
            "seq": "Sequence length",
            "samples": "Dataset samples",
            "epochs": "Epochs",
            "prompt": "Prompt tokens",
            "output": "Output tokens",
        }
        for key, value in values.items():
            self.page.get_by_label(labels[key]).fill(value)

    def submit_with_enter(self, label: str = "Batch size") -> None:
        self.page.get_by_label(label).press("Enter")

    def answered(self, shot: str) -> list[str]:
        """Wait for the answer and its charts; the table's rows (first cell of each)."""
        expect(self.page.locator("#results")).to_have_attribute("data-state", "ready")
        expect(self.page.locator("#charts")).to_have_attribute("data-ready", "true")
        rows = self.page.locator("#ranked tbody tr")
        assert rows.count() >= 1
        self.screenshot(shot)
        return [rows.nth(i).locator("th").inner_text() for i in range(rows.count())]

    def first_gpu_id(self) -> str:
        return self.page.locator("#ranked tbody tr").first.locator("th .small").inner_text()

    def charts_drawn(self, *names: str) -> None:
        for name in names:
            chart = self.page.locator(f"#chart-{name} svg")
            expect(chart).to_have_count(1)
            assert chart.get_attribute("aria-label"), name
            assert chart.locator("title").count() >= 1, name
            assert chart.locator("desc").text_content(), name
            assert chart.locator(CHART_MARKS[name]).count() >= 1, f"{name}: nothing drawn"

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


class TestInBrowser:
    def test_a_catalog_model_answered_charted_shared_and_exported(
        self, page: Page, live_server: str
    ) -> None:
        driver = Driver(page)
        driver.open()
        driver.catalog_model("bert-b", "bert-base")
        driver.workload("fine-tuning", batch="32", seq="384", samples="88000", epochs="2")
        driver.submit_with_enter("Epochs")
        gpus = driver.answered("catalog-answer")
        assert gpus[0].strip()
        first = driver.first_gpu_id()
        expect(page.locator("#status")).to_contain_text(f"{len(gpus)} candidates")
        driver.charts_drawn("time-cost", "memory", "step", "tco")
        expect(page.locator("#chart-trace")).to_have_count(0)  # no trace, no projection
        expect(page.locator("#summary")).not_to_be_empty()
        bottom = page.evaluate(  # of the table and the first two charts
            "document.querySelector('#chart-memory').getBoundingClientRect().bottom + scrollY"
        )
        shot = {"x": 0, "y": 0, "width": WIDTH, "height": bottom + 16}
        page.screenshot(path=ARTIFACTS / "web-page.png", full_page=True, clip=shot)

        share = page.locator("#share-link").get_attribute("href") or ""
        assert re.fullmatch(r"/\?id=[\w-]+", share), share
        assert page.url == live_server + share  # the address bar is the share link
        csv_href = page.locator("#csv-link").get_attribute("href") or ""
        quote_href = page.locator("#quote-link").get_attribute("href") or ""
        rec_id = share.split("=", 1)[1]
        assert csv_href == f"/v1/recommendations/{rec_id}/export.csv"
        assert quote_href == f"/v1/recommendations/{rec_id}/quote"

        shared = page.context.new_page()
        shared.goto(share)
        again = Driver(shared)
        again.answered("shared-answer")
        assert again.first_gpu_id() == first
        expect(shared.get_by_label("Model name")).to_have_value("bert-base")
        expect(shared.get_by_label("Batch size")).to_have_value("32")

        exported = page.request.get(live_server + csv_href)
        assert exported.status == 200, exported.text()[:300]
        assert exported.headers["content-type"].startswith("text/csv")
        table = list(csv.DictReader(io.StringIO(exported.text())))
        assert {"rank", "gpu"} <= set(table[0])
        assert table[0]["gpu"] == first
        quote = page.request.get(live_server + quote_href)
        assert quote.status == 200
        assert quote.headers["content-type"].startswith("text/html")

    def test_a_pasted_config_json_is_sent_as_the_model(self, page: Page) -> None:
        driver = Driver(page)
        driver.open()
        page.get_by_label("a config.json or JSON").check()
        page.get_by_label("Hugging Face config.json").fill(GPT2_CONFIG)
        driver.workload("inference", batch="1", prompt="500", output="100")
        driver.submit_with_enter("Output tokens")
        gpus = driver.answered("config-answer")
        assert gpus[0].strip()
        driver.charts_drawn("time-cost", "memory", "step", "tco")
        expect(page.locator("#chart-step figcaption")).to_have_text("Serving latency")
        sent = page.evaluate("fetch(location.search.replace('?id=', '/v1/recommendations/'))"
                             ".then(r => r.json()).then(a => a.request.model)")  # fmt: skip
        assert sent["model_type"] == "gpt2"  # unwrapped, as pasted
        assert "hf_config" not in sent

    def test_a_stack_is_chosen_among_the_tasks_and_kept_in_the_share(self, page: Page) -> None:
        """The stack list follows the task (serving stacks for inference); the one chosen is
        sent as the request's stack, the answer says it, and a shared answer shows it."""
        driver = Driver(page)
        driver.open()
        driver.catalog_model("llama-3-8", "llama-3-8b")
        driver.workload("inference", batch="1", prompt="1000", output="200")
        stack = page.get_by_label("Software stack")
        expect(stack.locator('option[value="vllm"]')).to_be_attached()
        expect(stack.locator('option[value="torchtitan"]')).to_have_count(0)
        stack.select_option("vllm")
        expect(page.locator("#stack-hint")).to_contain_text("vLLM")
        driver.submit_with_enter("Output tokens")
        driver.answered("stack-answer")
        answer = page.evaluate("fetch(location.search.replace('?id=', '/v1/recommendations/'))"
                               ".then(r => r.json())")  # fmt: skip
        assert answer["request"]["stack"] == "vllm"
        assert answer["stack"]["id"] == "vllm"
        shared = page.context.new_page()
        shared.goto(page.url)
        Driver(shared).answered("stack-shared")
        expect(shared.get_by_label("Software stack")).to_have_value("vllm")
        # a training task offers the training stacks and falls back to the default
        Driver(page).workload("training")
        expect(stack).to_have_value("")
        expect(stack.locator('option[value="torchtitan"]')).to_be_attached()

    def test_a_trace_is_uploaded_and_its_step_projected(self, page: Page) -> None:
        driver = Driver(page)
        driver.open()
        page.get_by_label("a trace of a run").check()
        page.get_by_label("Trace file").set_input_files(TRACE)
        page.get_by_label("API key").fill(WRITE_KEY)
        page.get_by_role("button", name="Recommend").click()
        driver.answered("trace-answer")
        driver.charts_drawn("time-cost", "trace", "tco")
        assert page.evaluate("sessionStorage.getItem('rightsize.api_key')") == WRITE_KEY

    def test_a_trace_analysed_in_the_background_is_followed(
        self, page: Page, live_server: str
    ) -> None:
        uploaded = page.request.post(
            live_server + "/v1/traces",
            multipart={"file": {"name": TRACE.name, "mimeType": "application/gzip",
                                "buffer": TRACE.read_bytes()}},
            headers={"Authorization": f"Bearer {WRITE_KEY}"},
        )  # fmt: skip
        trace_id = uploaded.json()["trace_id"]
        polls: list[str] = []

        def job(route: Route) -> None:
            polls.append(route.request.url)
            if len(polls) < 2:
                route.fulfill(json={"job_id": "j1", "status": "started", "progress": "reading"})
            else:
                route.fulfill(json={"job_id": "j1", "status": "finished", "trace_id": trace_id})

        # as a large trace is answered: 202 and a job to follow
        queued = {"job_id": "j1", "job_url": "/v1/jobs/j1", "status": "queued"}
        page.route(re.compile(r"/v1/traces$"), lambda route: route.fulfill(status=202, json=queued))
        page.route(re.compile(r"/v1/jobs/j1$"), job)
        driver = Driver(page)
        driver.open()
        page.get_by_label("a trace of a run").check()
        page.get_by_label("Trace file").set_input_files(TRACE)
        page.get_by_label("API key").fill(WRITE_KEY)
        page.get_by_role("button", name="Recommend").click()
        driver.answered("trace-job-answer")
        driver.charts_drawn("trace")
        assert len(polls) == 2
        assert "?id=" in page.url

    def test_the_search_works_where_the_api_cannot_filter(self, page: Page) -> None:
        unknown = {"status": 422, "errors": [{"location": "query", "field": "q",
                                              "message": "Unknown field."}]}  # fmt: skip
        refused: list[str] = []

        def refuse(route: Route) -> None:
            refused.append(route.request.url)
            problem = {"Content-Type": "application/problem+json"}
            route.fulfill(status=422, json=unknown, headers=problem)

        page.route(re.compile(r"/v1/models\?q="), refuse)
        driver = Driver(page)
        driver.open()
        driver.catalog_model("llama-3-8", "llama-3-8b")
        expect(page.locator("#model-list option")).not_to_have_count(0)
        names = page.locator("#model-list option").evaluate_all("os => os.map(o => o.value)")
        assert all("llama-3-8" in name for name in names), names
        assert refused  # the API was asked, then the page filtered the whole catalog

    def test_every_control_is_labelled_and_focus_shows(self, page: Page) -> None:
        Driver(page).open()
        unlabelled = page.evaluate(
            "[...document.querySelectorAll('input, select, textarea')]"
            ".filter(c => !c.labels.length).map(c => c.id || c.name)"
        )
        assert unlabelled == []
        style = (
            "(() => { const s = getComputedStyle(document.activeElement);"
            " return [document.activeElement.name, s.outlineStyle, s.outlineWidth]; })()"
        )
        for _ in range(4):  # past the skip link and the header's link to the form's first
            page.keyboard.press("Tab")
            name, outline, width = page.evaluate(style)
            if name == "source":
                break
        assert name == "source"
        assert outline != "none"
        assert width != "0px"

    def test_a_config_file_is_read_into_the_text_area(self, page: Page) -> None:
        driver = Driver(page)
        driver.open()
        page.get_by_label("a config.json or JSON").check()
        config = {"name": "config.json", "mimeType": "application/json",
                  "buffer": GPT2_CONFIG.encode()}  # fmt: skip
        page.get_by_label("Or read a config.json file").set_input_files(config)
        expect(page.get_by_label("Hugging Face config.json")).to_have_value(GPT2_CONFIG)

    def test_an_api_error_is_shown_next_to_its_field(self, page: Page) -> None:
        driver = Driver(page)
        driver.open()
        driver.catalog_model("bert", "bert-base")
        batch = page.get_by_label("Batch size")
        for typed, said in (("0", "between 1 and"), ("", "Missing data")):
            driver.workload("training", batch=typed, seq="128")
            driver.submit_with_enter()
            expect(page.locator("#results")).to_have_attribute("data-state", "error")
            note = page.locator("#error-batch-size")
            expect(note).to_contain_text(said)
            expect(batch).to_have_attribute("aria-invalid", "true")
            assert "error-batch-size" in (batch.get_attribute("aria-describedby") or "")
            expect(batch).to_be_focused()
        expect(page.locator("#general-error")).to_be_hidden()
        assert "?id=" not in page.url
        driver.screenshot("error")

        driver.open("/?id=no-such-answer")
        expect(page.locator("#general-error")).to_contain_text("no-such-answer")
