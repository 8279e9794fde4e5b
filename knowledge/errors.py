"""The knowledge package's error tree: every error keeps the offending input."""

from __future__ import annotations


class KnowledgeError(Exception):
    """Root of every error raised by :mod:`knowledge`."""


class KnowledgeFileError(KnowledgeError):
    """A data file is invalid: names the file, the row (record) and the field."""

    def __init__(self, file: str, row: str | None, field: str | None, message: str) -> None:
        self.file = file
        self.row = row
        self.field = field
        self.message = message
        where = file
        if row is not None:
            where += f", {row}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")


class KnowledgeInvalid(KnowledgeError):
    """Loading found one or more invalid files; ``errors`` holds each of them."""

    def __init__(self, errors: list[KnowledgeFileError]) -> None:
        self.errors = errors
        lines = "\n".join(f"  - {e}" for e in errors)
        super().__init__(f"invalid knowledge ({len(errors)} problem(s)):\n{lines}")


class UnknownId(KnowledgeError):
    """A lookup by id or name found nothing; ``suggestions`` holds close matches."""

    def __init__(self, kind: str, value: str, suggestions: list[str]) -> None:
        self.kind = kind
        self.value = value
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown {kind} '{value}'{hint}")
