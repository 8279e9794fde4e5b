"""The web page at ``/``: static files served by the app, no build step, no CDN.

A plain Flask blueprint (not flask-smorest's), so the page stays out of the OpenAPI
document. The page is one template and a few ES modules that call ``/v1`` from the
browser; it needs no key of its own (only ``/v1`` paths do).
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Flask, render_template

HERE = Path(__file__).parent
STATIC = HERE / "static"


def _blueprint() -> Blueprint:
    page = Blueprint("web", __name__, template_folder="templates")

    @page.get("/")
    def index() -> str:
        """The page; it reads ``?id=`` itself, so one template serves every answer."""
        return render_template("index.html")

    return page


def init_app(app: Flask) -> None:
    """Register the page's routes on ``app``."""
    # Flask(__name__) claims /static for service/static, which does not exist; a
    # blueprint's own /static rule would lose to it, so the app's rule serves the page's.
    app.static_folder = str(STATIC)
    app.register_blueprint(_blueprint())
