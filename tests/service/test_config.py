"""Settings from RIGHTSIZE_* environment variables."""

from __future__ import annotations

import pytest

from service.config import ConfigError, load_settings


class TestSettings:
    def test_defaults_without_environment(self) -> None:
        settings = load_settings(environ={})
        assert settings["RIGHTSIZE_REDIS_URL"] is None
        assert settings["RIGHTSIZE_CACHE_TTL_S"] == 86400

    def test_environment_is_parsed(self) -> None:
        env = {"RIGHTSIZE_REDIS_URL": "redis://h:1/2", "RIGHTSIZE_CACHE_TTL_S": "60"}
        settings = load_settings(environ=env)
        assert settings["RIGHTSIZE_REDIS_URL"] == "redis://h:1/2"
        assert settings["RIGHTSIZE_CACHE_TTL_S"] == 60

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            pytest.param("RIGHTSIZE_CACHE_TTL_S", "soon", id="not-a-number"),
            pytest.param("RIGHTSIZE_CACHE_TTL_S", "-5", id="negative"),
            pytest.param("RIGHTSIZE_REDIS_URL", "localhost:6379", id="no-scheme"),
            pytest.param("RIGHTSIZE_LOG_LEVEL", "LOUD", id="bad-level"),
            pytest.param("RIGHTSIZE_COMPUTE_PROCESSES", "-1", id="negative-processes"),
            pytest.param("RIGHTSIZE_COMPUTE_NICE", "20", id="niceness-past-19"),
        ],
    )
    def test_bad_value_names_the_key(self, key: str, value: str) -> None:
        with pytest.raises(ConfigError, match=key):
            load_settings(environ={key: value})

    def test_overrides_take_short_or_full_names(self) -> None:
        settings = load_settings({"CACHE_TTL_S": 5, "TESTING": True}, environ={})
        assert settings["RIGHTSIZE_CACHE_TTL_S"] == 5
        assert settings["TESTING"] is True
