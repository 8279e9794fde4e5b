"""The command line, ``rightsize``: its commands (main), the ones that call the API
through the Python client (commands), their options, tables and reports."""

from service.cli.main import main

__all__ = ["main"]
