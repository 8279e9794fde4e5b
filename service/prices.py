"""Refreshed cloud prices (admin): a price catalog checked against the knowledge, kept
whole or not at all, and laid over the curated prices by the running services.

The file (``RIGHTSIZE_PRICES_FILE``, ``offer_prices.csv``'s columns) is replaced
atomically (written beside, fsynced, renamed), with who refreshed it and when beside it;
services see the new file by its modification time and switch to it once the model for
the new knowledge version is built (:class:`service.overlays.Layers`), never blocking
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
from service.infra.files import FileTooLarge, read_bounded, write_all_atomically
from service.submissions import RejectedBatch

log = logging.getLogger(__name__)
FILE_MAX_BYTES = 64 * 2**20  # a refresh is at most 50,000 rows (knowledge.prices.MAX_ROWS)


def catalog_text(data: bytes) -> str:
    """A price catalog's bytes as text: UTF-8, without the byte-order mark a spreadsheet's
    "CSV UTF-8" writes, line endings as sent (the check refuses bare CRs by name). Raises
    ValueError saying what was expected."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the catalog is not UTF-8 text (byte {exc.start})") from None


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
        write_all_atomically({self.path: text, self.meta_path: json.dumps(meta, indent=1)})
        return meta

    def priced(self, knowledge: Knowledge) -> Priced | None:
        """The refreshed prices (None without a file, or when it no longer checks against
        ``knowledge``: logged, the curated prices stay)."""
        try:
            text = read_bounded(self.path, FILE_MAX_BYTES)
        except FileNotFoundError:
            return None
        except (FileTooLarge, UnicodeDecodeError) as exc:
            log.warning("%s: %s; curated prices used", self.path, exc)
            return None
        priced, errors = check_prices(knowledge, text)
        if errors:
            log.warning("%s no longer checks (%s): curated prices used", self.path, errors[0])
            return None
        return priced
