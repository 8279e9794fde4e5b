"""What a request is estimated and costed on: the curated knowledge, with the submitted
benchmark rows the last retrain fitted (``service.submissions``) and the refreshed cloud
prices (``service.prices``) laid over it.

:class:`Layers` watches the retrain marker and the price file by modification time; when
either changes it builds the new services in a background thread (a model per knowledge
version) and switches to them when they are ready, so that no request waits and none is
answered by half of a change.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from knowledge import Knowledge
from knowledge.prices import with_prices
from knowledge.submitted import layered
from service.engine.estimating.on_request import EstimateService
from service.infra.files import mtime
from service.prices import PriceFile
from service.submissions import SubmissionStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Loaded:
    everything: EstimateService  # curated + trained rows + prices
    curated: EstimateService  # curated rows + prices
    marker: dict[str, Any] | None  # the retrain in use (None: no submitted rows)


class Layers:
    def __init__(self, base: EstimateService, store: SubmissionStore, prices: PriceFile) -> None:
        self.base = base
        self.store = store
        self.prices = prices
        self._loaded = _Loaded(base, base, None)
        self._seen: tuple[float | None, float | None] = (None, None)
        self._lock = threading.Lock()
        self._loading: threading.Thread | None = None

    def service(self, include_submitted: bool = True) -> EstimateService:
        """The service for a request (``include_submitted``: with the retrained rows)."""
        self._refresh()
        loaded = self._loaded
        return loaded.everything if include_submitted else loaded.curated

    def marker(self) -> dict[str, Any] | None:
        """What the trained layer in use was fitted on (None: the curated rows only)."""
        self._refresh()
        return self._loaded.marker

    def watch(self, interval_s: float = 5.0) -> threading.Thread:
        """Look for a change every ``interval_s`` in a daemon thread (gunicorn starts one
        in each worker), so that a quiet service switches too, not only on its next
        request."""

        def loop() -> None:
            while True:
                self._refresh()
                time.sleep(interval_s)

        watcher = threading.Thread(target=loop, name="layers-watch", daemon=True)
        watcher.start()
        return watcher

    def load_now(self) -> None:
        """Pick up a change and wait for its model (start-up, tests)."""
        self._refresh()
        loading = self._loading
        if loading is not None:
            loading.join()

    def _signature(self) -> tuple[float | None, float | None]:
        return mtime(self.store.trained_path), mtime(self.prices.path)

    def _refresh(self) -> None:
        signature = self._signature()
        if signature == self._seen:
            return
        with self._lock:
            if signature == self._seen or (self._loading and self._loading.is_alive()):
                return
            self._seen = signature
            self._loading = threading.Thread(target=self._load, name="layers", daemon=True)
            self._loading.start()

    def _load(self) -> None:
        base = self.base.knowledge
        trained, marker = trained_knowledge(base, self.store)
        priced = self.prices.priced(base)
        try:
            everything = self._built(with_prices(trained, priced) if priced else trained)
            curated = self._built(with_prices(base, priced) if priced else base)
        except Exception:
            log.exception("building a model for the new layers failed; keeping the old ones")
            return
        self._loaded = _Loaded(everything, curated, marker)
        log.info(
            "layers: %s (submitted rows %d, refreshed prices %s)",
            everything.knowledge.version,
            marker["submitted_rows"] if marker else 0,
            "yes" if priced else "no",
        )

    def _built(self, knowledge: Knowledge) -> EstimateService:
        if knowledge is self.base.knowledge:
            return self.base
        service = replace(self.base, knowledge=knowledge)
        service.model()
        return service


def trained_knowledge(
    base: Knowledge, store: SubmissionStore
) -> tuple[Knowledge, dict[str, Any] | None]:
    """``base`` with the submitted rows the last retrain fitted, and its marker (``base``
    and None without a retrain, or one made on other curated knowledge)."""
    marker = store.trained()
    if marker is None or marker.get("base_version") != base.version:
        return base, None
    wanted = set(marker.get("row_ids") or [])
    found = layered(base, [(i, b) for i, b in store.benchmarks(base) if i in wanted])
    if found.version != marker.get("knowledge_version"):
        log.warning(
            "trained marker %s does not match the stored rows (%s): not used",
            marker.get("knowledge_version"),
            found.version,
        )
        return base, None
    return found, marker


def knowledge_in_use(base: Knowledge, store: SubmissionStore, prices: PriceFile) -> Knowledge:
    """What the services estimate on: the retrained rows and the refreshed prices."""
    trained, _ = trained_knowledge(base, store)
    priced = prices.priced(base)
    return with_prices(trained, priced) if priced else trained
