"""The OpenAPI document, rendered deterministically from the code."""

from __future__ import annotations

import yaml
from flask import Flask


def spec_yaml(app: Flask) -> str:
    """``openapi.yaml`` as the code describes it (what ``rightsize openapi`` writes)."""
    api = app.extensions["flask-smorest"]["apis"][""]["ext_obj"]
    with app.app_context():
        spec = api.spec.to_dict()
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=100)
