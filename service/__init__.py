"""rightsize: which GPU hardware to buy or rent for a deep-learning workload, and why.

``create_app`` (:mod:`service.app`) builds the Flask application. It is imported when it is
first asked for, not with the package: a command that only talks to a server (``rightsize
gpus --url ...``) does not load the engine, torch and the knowledge to do so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.app import compute_app, create_app

__all__ = ["compute_app", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from service import app

        return getattr(app, name)
    raise AttributeError(f"module 'service' has no attribute {name!r}")
