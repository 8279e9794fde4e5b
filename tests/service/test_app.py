"""The app factory, health probes, errors and docs."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from knowledge import KnowledgeInvalid
from service import create_app
from service.state import state
from tests.service.helpers import problem


class TestFactory:
    def test_each_app_has_its_own_state(self) -> None:
        first, second = create_app({"TESTING": True}), create_app({"TESTING": True})
        with first.app_context():
            first_state = state()
        with second.app_context():
            assert state() is not first_state
            assert state().knowledge is first_state.knowledge  # loaded once, shared

    def test_refuses_to_start_on_invalid_knowledge(self, tmp_path: Path) -> None:
        (tmp_path / "gpus").mkdir()
        (tmp_path / "gpus" / "bad.yaml").write_text("- id: Not An Id\n", encoding="utf-8")
        with pytest.raises(KnowledgeInvalid, match=r"gpus/bad.yaml, record 1.*'id'"):
            create_app({"KNOWLEDGE_DIR": str(tmp_path)})

    def test_bad_setting_fails_at_start_naming_the_key(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RIGHTSIZE_CACHE_TTL_S", "forever")
        with pytest.raises(ValueError, match="RIGHTSIZE_CACHE_TTL_S"):
            create_app()


class TestProbes:
    def test_liveness(self, client: FlaskClient) -> None:
        assert client.get("/healthz").get_json() == {"status": "ok"}

    def test_ready_on_the_embedded_store_says_so(self, client: FlaskClient) -> None:
        response = client.get("/readyz")
        body = response.get_json()
        assert response.status_code == 200
        assert body["status"] == "ready"
        assert body["cache"]["backend"] == "sqlite"
        assert body["cache"]["fallback"] is False
        assert "RIGHTSIZE_REDIS_URL" in body["cache"]["detail"]
        assert body["cache"]["path"].endswith("store.sqlite3")
        assert body["knowledge"]["loaded"] is True
        assert body["knowledge"]["counts"]["gpus"] >= 35
        assert response.headers["X-Knowledge-Version"] == body["knowledge"]["version"]

    def test_ready_with_real_redis(self, redis_url: str, redis_prefix: str) -> None:
        app = create_app({"REDIS_URL": redis_url, "KEY_PREFIX": redis_prefix})
        body = app.test_client().get("/readyz").get_json()
        assert body["status"] == "ready"
        assert body["cache"] == {
            "backend": "redis",
            "ok": True,
            "fallback": False,
            "detail": "Redis reachable",
        }

    def test_degraded_when_configured_redis_is_down(self) -> None:
        app = create_app({"REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_TIMEOUT_S": 0.2})
        response = app.test_client().get("/readyz")
        assert response.status_code == 200  # still serving: a balancer keeps it in rotation
        body = response.get_json()
        assert body["status"] == "degraded"
        assert body["cache"]["ok"] is False
        assert body["cache"]["detail"].startswith("Redis unreachable")


class TestErrors:
    def test_unknown_route_is_problem_json(self, client: FlaskClient) -> None:
        problem(client.get("/v1/nothing-here"), 404)

    def test_wrong_method_is_problem_json(self, client: FlaskClient) -> None:
        response = client.delete("/v1/gpus")
        problem(response, 405)
        assert "GET" in response.headers["Allow"]

    def test_unexpected_exception_is_a_500_problem(self, client: FlaskClient) -> None:
        app = client.application

        @app.route("/boom")
        def boom() -> str:
            raise RuntimeError("kaboom")

        body = problem(client.get("/boom"), 500)
        assert "kaboom" not in body["detail"]


class TestDocs:
    def test_docs_page_and_its_assets_are_served_locally(self, client: FlaskClient) -> None:
        page = client.get("/docs")
        assert page.status_code == 200
        html = page.get_data(as_text=True)
        assert "/docs/assets/swagger-ui-bundle.js" in html
        with client.get("/docs/assets/swagger-ui-bundle.js") as asset:
            assert asset.status_code == 200
            assert len(asset.get_data()) > 100_000

    def test_openapi_json_is_served(self, client: FlaskClient) -> None:
        spec = client.get("/openapi.json").get_json()
        assert spec["openapi"].startswith("3.")
        assert "/v1/gpus" in spec["paths"]
