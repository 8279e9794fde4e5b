"""The ``rightsize`` command line: serve the API, write the OpenAPI file, check knowledge."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from knowledge import KnowledgeInvalid, load_knowledge


@click.group()
def main() -> None:
    """rightsize: which GPU hardware to buy or rent for a deep-learning workload, and why."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--workers", default=2, show_default=True, type=int)
def serve(host: str, port: int, workers: int) -> None:
    """Serve the API with gunicorn (Redis if RIGHTSIZE_REDIS_URL is set, else in-process)."""
    from gunicorn.app.base import BaseApplication

    from service import create_app

    try:
        app = create_app()
    except KnowledgeInvalid as exc:
        raise click.ClickException(f"refusing to start: {exc}") from None

    class _Server(BaseApplication):
        def load_config(self) -> None:
            self.cfg.set("bind", f"{host}:{port}")
            self.cfg.set("workers", workers)
            self.cfg.set("accesslog", "-")

        def load(self) -> Any:
            return app

    click.echo(f"rightsize on http://{host}:{port} (API docs at /docs)")
    _Server().run()


@main.command()
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="file to write (default: print)")  # fmt: skip
def openapi(output: Path | None) -> None:
    """Write the OpenAPI document generated from the code (openapi.yaml)."""
    from service import create_app
    from service.openapi import spec_yaml

    text = spec_yaml(create_app())
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}")


@main.group()
def knowledge() -> None:
    """Inspect and derive the knowledge base."""


@knowledge.command("check")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False), default=None)
def knowledge_check(root: Path | None) -> None:
    """Load and validate every knowledge file; print counts and unresolved benchmark rows."""
    try:
        kb = load_knowledge(root)
    except KnowledgeInvalid as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    click.echo(f"knowledge version {kb.version}")
    for name, count in kb.stats().items():
        click.echo(f"  {name}: {count}")
    for line in kb.unresolved:
        click.echo(f"  unresolved: {line}")


@knowledge.command("derive", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def knowledge_derive(args: tuple[str, ...]) -> None:
    """Re-derive the tables taken from ../shared/data (same as python -m knowledge.derive)."""
    from knowledge.derive.__main__ import main as derive_main

    sys.exit(derive_main(list(args)))
