"""Whose stored data a request may read: what a key stores is its own.

Traces and submitted benchmark rows carry their owner, the id of the API key that sent
them. :class:`Reader` is who asks: an administrator's key reads everything, any other key
what it owns, and a request without a key nothing of anyone's. Whatever a reader may not
read is answered as if it did not exist (404, never 403), so that ids reveal nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reader:
    """Who asks: a key's id (None without a key), and whether the key is an admin's."""

    key_id: str | None = None
    admin: bool = False

    def may_read(self, owner: str | None) -> bool:
        """Whether this reader may read what ``owner`` stored (None: stored by no key
        known, e.g. before owners were kept: the administrators' alone)."""
        return self.admin or (self.key_id is not None and owner == self.key_id)


NOBODY = Reader()  # a request without a key: reads nothing anyone stored
