"""Small helpers for API tests."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from werkzeug.test import TestResponse

PROBLEM = "application/problem+json"


def get_json(client: FlaskClient, url: str, status: int = 200) -> Any:
    response = client.get(url)
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def problem(response: TestResponse, status: int) -> dict[str, Any]:
    """Assert ``response`` is a problem+json of ``status``; return its body."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM
    body: dict[str, Any] = response.get_json()
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]
    assert body["type"].startswith("http")
    return body


def fields_in(body: dict[str, Any]) -> set[str]:
    return {e["field"] for e in body.get("errors", [])}
