"""Refreshed cloud prices (admin): a price catalog checked against the knowledge, kept
whole or not at all, and laid over the curated prices by the running services.

The file (``RIGHTSIZE_PRICES_FILE``, ``offer_prices.csv``'s columns) is replaced
atomically (written beside, fsynced, renamed), with who refreshed it and when beside it;
services see the new file by its modification time and switch to it once the model for
the new knowledge version is built (:class:`service.layers.Layers`), never blocking
a request on it. Replicas share it as they share the keys file.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

from knowledge import Knowledge
from knowledge.prices import Priced, check_prices
from service.files import write_atomically
from service.submissions import RejectedBatch

log = logging.getLogger(__name__)


class PriceFile:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.meta_path = self.path.with_name(self.path.stem + ".meta.json")

    def refresh(self, knowledge: Knowledge, text: str, refreshed_by: str) -> dict[str, Any]:
        """Check ``text`` against ``knowledge`` and make it the price catalog; raises
        :class:`RejectedBatch` (nothing changed) naming every fault."""
        priced, errors = check_prices(knowledge, text)
        if errors:
            raise RejectedBatch(errors)
        meta = {
            "refreshed_by": refreshed_by,
            "refreshed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "rows": sum(len(p) for p in priced.values()),
            "offers": len(priced),
        }
        write_atomically(self.meta_path, json.dumps(meta, indent=1))
        write_atomically(self.path, text)
        return meta

    def priced(self, knowledge: Knowledge) -> Priced | None:
        """The refreshed prices (None without a file, or when it no longer checks against
        ``knowledge``: logged, the curated prices stay)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        priced, errors = check_prices(knowledge, text)
        if errors:
            log.warning("%s no longer checks (%s): curated prices used", self.path, errors[0])
            return None
        return priced
