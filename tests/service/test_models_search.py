"""GET /v1/models?q=: the catalog searched by name, alias and family, then paginated."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from flask.testing import FlaskClient

from profiles.model_catalog import Catalog
from tests.service.helpers import fields_in, get_json, problem


def _names(body: dict) -> list[str]:
    return [m["name"] for m in body["items"]]


class TestModelSearch:
    def test_words_match_in_any_order_of_case_and_punctuation(self, client: FlaskClient) -> None:
        body = get_json(client, "/v1/models?q=" + quote("llama 3.2"))
        assert _names(body) == ["llama-3.2-1b", "llama-3.2-3b"]
        assert body["total"] == 2
        assert _names(get_json(client, "/v1/models?q=QWEN%202.5%207b")) == ["qwen2.5-7b"]

    @pytest.mark.parametrize(
        ("query", "first"),
        [
            pytest.param("Qwen2.5-7B", "qwen2.5-7b", id="hf-repo-name"),
            pytest.param("meta-llama/Llama-3.2-1B", "llama-3.2-1b", id="org-prefixed"),
            pytest.param("gpt2", "gpt2", id="exact-before-prefix"),
        ],
    )
    def test_exact_match_first(self, client: FlaskClient, query: str, first: str) -> None:
        body = get_json(client, "/v1/models?q=" + quote(query, safe=""))
        assert _names(body)[0] == first
        assert body["items"][0]["parameters"] > 0

    def test_filters_before_paginating(self, client: FlaskClient) -> None:
        everything = get_json(client, "/v1/models?q=whisper&page_size=500")
        assert everything["total"] >= 6
        assert all(n.startswith("whisper-") for n in _names(everything))
        first = get_json(client, "/v1/models?q=whisper&page_size=2")
        second = get_json(client, "/v1/models?q=whisper&page_size=2&page=2")
        assert first["total"] == everything["total"]
        assert first["pages"] == (everything["total"] + 1) // 2
        assert _names(first) + _names(second) == _names(everything)[:4]

    def test_no_match_is_an_empty_page(self, client: FlaskClient) -> None:
        body = get_json(client, "/v1/models?q=no-such-model-zzz")
        assert body["total"] == 0
        assert body["items"] == []

    def test_without_q_lists_every_model_by_name(self, client: FlaskClient) -> None:
        body = get_json(client, "/v1/models?page_size=500")
        assert body["total"] == len(Catalog.load().entries) >= 80
        assert _names(body) == sorted(_names(body))

    def test_too_long_a_query_is_422_naming_q(self, client: FlaskClient) -> None:
        body = problem(client.get("/v1/models?q=" + "a" * 201), 422)
        assert "q" in fields_in(body)
        assert all(e["location"] == "query" for e in body["errors"])
