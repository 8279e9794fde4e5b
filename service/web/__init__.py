"""The web page at ``/``: static files served by the app, no build step, no CDN."""

from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    """Register the page's routes on ``app``."""
