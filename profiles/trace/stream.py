"""Split a Chrome-trace JSON byte stream into events, with bounded memory and hard limits.

The stream is read in chunks. A vectorised scan (numpy) of each chunk finds the string
boundaries (quotes not escaped by an odd run of backslashes) and the structural brackets,
which gives the nesting depth at every byte: that enforces the depth limit before any
object is built, and it finds where each event object of ``traceEvents`` starts and ends.
Complete events are then parsed a chunk at a time by orjson (C). Everything outside the
events array (``deviceProperties``, ``distributedInfo``, ...) is kept as text, bounded, and
parsed at the end. Memory stays at a few chunks however large the trace is.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
import orjson

CHUNK = 1 << 22
RATIO_FROM = 64 * 2**20  # the decompression ratio is checked past this many bytes
_QUOTE, _BACKSLASH = 34, 92
_STEP = np.zeros(256, dtype=np.int8)  # +1 for an opening bracket, -1 for a closing one
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
# bytes.translate table: 1 for the bytes the scan looks at, 0 for all others
_SPECIAL = bytes(1 if b in b'[]{}"\\' else 0 for b in range(256))
KEY = b'"traceEvents"'
_PHASE = re.compile(rb'\{\s*"ph"\s*:\s*"([^"]*)"')
_KINETO_PREFIX = tuple(enumerate(b'{\n    "ph": "'))  # the layout Kineto writes
_KINETO_PHASE = len(_KINETO_PREFIX)


class TraceFormatError(ValueError):
    """Not a readable trace; ``kind`` says which limit or check failed."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


@dataclass(frozen=True)
class Limits:
    compressed_bytes: int = 512 * 2**20
    decompressed_bytes: int = 4 * 2**30
    ratio: float = 100.0  # decompressed / compressed, checked past 64 MiB decompressed
    events: int = 20_000_000
    depth: int = 32
    event_bytes: int = 16 * 2**20
    metadata_bytes: int = 16 * 2**20


@dataclass
class StreamStats:
    compressed_bytes: int = 0
    decompressed_bytes: int = 0
    events: int = 0
    max_depth: int = 0
    gzipped: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


class _CountingReader(io.RawIOBase):
    """Counts what is read from the upload and stops at the compressed-size limit."""

    def __init__(self, raw: BinaryIO, limits: Limits, stats: StreamStats) -> None:
        self.raw, self.limits, self.stats = raw, limits, stats

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        n = len(data)
        self.stats.compressed_bytes += n
        if self.stats.compressed_bytes > self.limits.compressed_bytes:
            raise TraceFormatError(
                "too-large", f"the upload exceeds {self.limits.compressed_bytes} bytes"
            )
        buffer[:n] = data
        return n


def chunks(raw: BinaryIO, limits: Limits, stats: StreamStats) -> Iterator[bytes]:
    """Decompressed chunks (gzip detected by its magic bytes), with size and ratio limits."""
    counted = io.BufferedReader(_CountingReader(raw, limits, stats), buffer_size=CHUNK)
    stats.gzipped = counted.peek(2)[:2] == b"\x1f\x8b"
    source: Any = gzip.GzipFile(fileobj=counted) if stats.gzipped else counted
    while True:
        try:
            chunk = source.read(CHUNK)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceFormatError(
                "truncated", f"the gzip stream is corrupt or cut off ({exc})"
            ) from None
        if not chunk:
            return
        stats.decompressed_bytes += len(chunk)
        if stats.decompressed_bytes > limits.decompressed_bytes:
            raise TraceFormatError(
                "too-large",
                f"the trace decompresses to more than {limits.decompressed_bytes} bytes",
            )
        if (
            stats.gzipped
            and stats.decompressed_bytes > RATIO_FROM
            and stats.decompressed_bytes > limits.ratio * max(stats.compressed_bytes, 1)
        ):
            raise TraceFormatError(
                "too-large", f"decompression ratio above {limits.ratio:g}: refused as a gzip bomb"
            )
        yield chunk


class _Scanner:
    """Carries string, escape and depth state from one chunk to the next."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.in_string = 0  # 1 when the previous chunk ended inside a string
        self.backslashes = 0  # backslashes ending the previous chunk
        self.depth = 0

    def scan(self, chunk: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the structural brackets in ``chunk``, and the depth after each."""
        arr = np.frombuffer(chunk, dtype=np.uint8)
        special = np.flatnonzero(np.frombuffer(chunk.translate(_SPECIAL), dtype=np.bool_))
        kinds = arr[special]
        quotes = special[kinds == _QUOTE]
        if len(quotes) and (self.backslashes or (kinds == _BACKSLASH).any()):
            quotes = quotes[~self._escaped(arr, quotes)]
        self.backslashes = _trailing_backslashes(arr, self.backslashes)
        brackets = special[_STEP[kinds] != 0]
        outside = ((np.searchsorted(quotes, brackets) + self.in_string) & 1) == 0
        structural = brackets[outside]
        self.in_string = (len(quotes) + self.in_string) & 1
        depths = self.depth + np.cumsum(_STEP[arr[structural]], dtype=np.int64)
        if len(depths):
            if int(depths.max()) > self.limits.depth:
                raise TraceFormatError(
                    "too-deep", f"JSON nested deeper than {self.limits.depth} levels"
                )
            if int(depths.min()) < 0:
                raise TraceFormatError("not-json", "unbalanced brackets: not a JSON document")
            self.depth = int(depths[-1])
        return structural, depths

    def _escaped(self, arr: np.ndarray, quotes: np.ndarray) -> np.ndarray:
        """Which quotes follow an odd run of backslashes (a run may start in the last chunk)."""
        escaped = np.zeros(len(quotes), dtype=bool)
        for i in np.flatnonzero(_preceded_by_backslash(arr, quotes, self.backslashes)):
            q = int(quotes[i])
            run = 0
            while q - run - 1 >= 0 and arr[q - run - 1] == _BACKSLASH:
                run += 1
            if q - run == 0:
                run += self.backslashes
            escaped[i] = bool(run & 1)
        return escaped


def _preceded_by_backslash(arr: np.ndarray, quotes: np.ndarray, carried: int) -> np.ndarray:
    previous = quotes - 1
    hit = np.zeros(len(quotes), dtype=bool)
    inner = previous >= 0
    hit[inner] = arr[previous[inner]] == _BACKSLASH
    if carried and len(quotes) and quotes[0] == 0:
        hit[0] = True
    return hit


def _trailing_backslashes(arr: np.ndarray, carried: int) -> int:
    run = 0
    while run < len(arr) and arr[len(arr) - 1 - run] == _BACKSLASH:
        run += 1
    return carried + run if run == len(arr) else run


@dataclass
class _Split:
    """Where the splitter stands: before, inside or after the events array."""

    level: int  # depth of the events array: 2 inside a top-level object, 1 for a bare array
    mode: str = "before"  # before | events | after
    partial: bytearray | None = None  # an event cut off by the end of the previous chunk
    meta: bytearray = field(default_factory=bytearray)


class TraceStream:
    """Iterate the events of a trace; afterwards ``stats.metadata`` holds the other keys."""

    def __init__(
        self,
        raw: BinaryIO,
        limits: Limits | None = None,
        skip_phases: frozenset[bytes] = frozenset(),
        progress: Callable[[StreamStats], None] | None = None,
    ) -> None:
        """``skip_phases``: event phases (``ph``) not to parse at all, e.g. flow events
        (``s``, ``f``); recognised when ``ph`` is an event's first key, as Kineto writes it."""
        self.raw = raw
        self.limits = limits or Limits()
        self.skip_phases = skip_phases
        self.progress = progress  # hears the stats after each chunk read
        self.stats = StreamStats()
        # where the events come from, for trace_index (set per parsed text, never per event)
        self._span: tuple[int, np.ndarray | None] = (0, None)  # elements, offsets of kept
        self._elements = 0  # traceEvents elements before the text being parsed
        self._yielded = 0  # events yielded before it
        self._batch: tuple[int, np.ndarray | None, int, list[Any]] = (0, None, 0, [])

    def trace_index(self, ordinal: int) -> int | None:
        """The index in traceEvents of the ``ordinal``-th event (from 0) this iterator has
        yielded, if it is in the text now being parsed (the error path: a few microseconds)."""
        base, offsets, first, parsed = self._batch
        wanted = ordinal - first
        if wanted < 0:
            return None
        seen = -1
        for position, event in enumerate(parsed):
            seen += isinstance(event, dict)
            if seen == wanted:
                return base + (position if offsets is None else int(offsets[position]))
        return None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        scanner = _Scanner(self.limits)
        state: _Split | None = None
        for chunk in chunks(self.raw, self.limits, self.stats):
            positions, depths = scanner.scan(chunk)
            if state is None:
                if len(positions) == 0:
                    if chunk.strip():
                        raise TraceFormatError("not-json", "the upload is not a JSON document")
                    continue
                state = self._start(chunk, positions)
            for text in self._split(chunk, positions, depths, state):
                yield from self._parse(text)
            if self.progress is not None:
                self.progress(self.stats)
        if state is None:
            raise TraceFormatError("not-json", "the upload is empty")
        if scanner.in_string or scanner.depth != 0:
            raise TraceFormatError("truncated", "the JSON document ends before it is complete")
        if state.mode != "after":
            raise TraceFormatError("not-a-trace", "no traceEvents array in the JSON document")
        if state.level == 2:
            try:
                parsed = orjson.loads(bytes(state.meta))
            except orjson.JSONDecodeError as exc:
                raise TraceFormatError("not-json", f"not valid JSON: {exc}") from None
            self.stats.metadata = parsed if isinstance(parsed, dict) else {}

    @staticmethod
    def _start(chunk: bytes, positions: np.ndarray) -> _Split:
        first = int(positions[0])
        if chunk[:first].strip():
            raise TraceFormatError("not-json", "the upload does not start with a JSON value")
        return _Split(level=2 if chunk[first] == ord("{") else 1)

    def _split(
        self, chunk: bytes, positions: np.ndarray, depths: np.ndarray, state: _Split
    ) -> Iterator[bytes]:
        """Event texts (batches of whole events as one JSON array, or single events)."""
        chars = np.frombuffer(chunk, dtype=np.uint8)[positions]
        opening = (chars == ord("{")) | (chars == ord("["))
        before = np.where(opening, depths - 1, depths + 1)
        cursor = 0
        if state.mode == "before":
            start = self._array_start(chunk, positions, chars, before, state)
            if start is None:
                self._keep_meta(state, chunk)
                return
            state.mode, cursor = "events", start + 1
        end = len(chunk)
        if state.mode == "events":
            closing = np.flatnonzero(
                (chars == ord("]")) & (depths == state.level - 1) & (positions >= cursor)
            )
            if len(closing):
                end = int(positions[closing[0]])
            inside = (positions >= cursor) & (positions < end)
            starts = positions[inside & (chars == ord("{")) & (before == state.level)]
            ends = positions[inside & (chars == ord("}")) & (depths == state.level)]
            yield from self._events(chunk, starts, ends, cursor, end, state)
            if len(closing):
                state.mode = "after"
                self._keep_meta(state, chunk[end + 1 :])
        elif state.mode == "after":
            self._keep_meta(state, chunk)

    def _events(
        self,
        chunk: bytes,
        starts: np.ndarray,
        ends: np.ndarray,
        cursor: int,
        end: int,
        state: _Split,
    ) -> Iterator[bytes]:
        limit = self.limits.event_bytes
        if state.partial is not None:
            if len(ends) == 0 or (len(starts) and starts[0] < ends[0]):
                state.partial += chunk[cursor:end]
                self._check_partial(state)
                return
            self._span = (1, None)
            yield bytes(state.partial) + chunk[cursor : int(ends[0]) + 1]
            state.partial = None
            ends = ends[1:]
        whole = min(len(starts), len(ends))
        if whole:
            if int((ends[:whole] - starts[:whole]).max()) >= limit:
                raise TraceFormatError("too-large", f"a trace event is larger than {limit} bytes")
            if self.skip_phases:
                yield self._kept(chunk, starts[:whole], ends[:whole])
            else:
                self._span = (whole, None)
                yield b"[" + chunk[int(starts[0]) : int(ends[whole - 1]) + 1] + b"]"
        if len(starts) > whole:
            state.partial = bytearray(chunk[int(starts[whole]) : end])
            self._check_partial(state)

    def _kept(self, chunk: bytes, starts: np.ndarray, ends: np.ndarray) -> bytes:
        """The events of ``chunk`` whose phase is not skipped, as one JSON array.

        Kineto writes each event as ``{\\n    "ph": "X", ...``: where that layout is found the
        phase is read at its fixed offset (vectorised); elsewhere by a regular expression.
        """
        arr = np.frombuffer(chunk, dtype=np.uint8)
        size = len(arr)
        fixed = starts + _KINETO_PHASE < size
        at = np.where(fixed, starts, 0)
        layout = fixed.copy()
        for offset, byte in _KINETO_PREFIX:
            layout &= arr[at + offset] == byte
        codes = np.frombuffer(b"".join(self.skip_phases), dtype=np.uint8)
        skipped = (
            layout
            & np.isin(arr[at + _KINETO_PHASE], codes)
            & (arr[at + _KINETO_PHASE + 1] == _QUOTE)
        )
        keep = ~skipped
        for i in np.flatnonzero(~layout):  # other layouts: check each such event
            found = _PHASE.match(chunk, int(starts[i]))
            if found is not None and found.group(1) in self.skip_phases:
                keep[i] = False
        self.stats.events += int(len(keep) - keep.sum())
        self._span = (len(keep), np.flatnonzero(keep))
        spans = zip(starts[keep].tolist(), (ends[keep] + 1).tolist(), strict=True)
        return b"[" + b",".join([chunk[a:b] for a, b in spans]) + b"]"

    def _check_partial(self, state: _Split) -> None:
        if state.partial is not None and len(state.partial) > self.limits.event_bytes:
            raise TraceFormatError(
                "too-large", f"a trace event is larger than {self.limits.event_bytes} bytes"
            )

    def _array_start(
        self,
        chunk: bytes,
        positions: np.ndarray,
        chars: np.ndarray,
        before: np.ndarray,
        state: _Split,
    ) -> int | None:
        """Position of the ``[`` that opens the events array, if it is in this chunk."""
        if state.level == 1:
            return int(positions[0])
        for index in np.flatnonzero((chars == ord("[")) & (before == 1)):
            pos = int(positions[index])
            head = (bytes(state.meta[-64:]) + chunk[:pos]).rstrip()
            if head.endswith(b":") and head[:-1].rstrip().endswith(KEY):
                self._keep_meta(state, chunk[:pos] + b"[]")
                return pos
        return None

    def _keep_meta(self, state: _Split, text: bytes) -> None:
        if state.level != 2:
            return
        state.meta += text
        if len(state.meta) > self.limits.metadata_bytes:
            raise TraceFormatError(
                "too-large", f"the trace's metadata exceeds {self.limits.metadata_bytes} bytes"
            )

    def _parse(self, text: bytes) -> Iterator[dict[str, Any]]:
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError("not-json", f"a trace event is not valid JSON: {exc}") from None
        events = parsed if text[:1] == b"[" else [parsed]
        self.stats.events += len(events)
        if self.stats.events > self.limits.events:
            raise TraceFormatError("too-large", f"more than {self.limits.events} trace events")
        elements, offsets = self._span
        self._batch = (self._elements, offsets, self._yielded, events)
        self._elements += elements
        others = 0
        for event in events:
            if isinstance(event, dict):
                yield event
            else:
                others += 1
        self._yielded += len(events) - others
