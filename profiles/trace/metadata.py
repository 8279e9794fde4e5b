"""Check the trace-level metadata that the analysis reads, before it reads it.

Beside ``traceEvents`` Kineto writes ``deviceProperties`` (one object per GPU of the host:
``id``, ``name``, memory, compute capability, SM count, ...) and ``distributedInfo``
(``backend``, ``rank``, ``world_size``). The analysis picks the traced GPU by ``id``, names
it by ``name`` (which resolves the reference GPU), copies a few numeric fields into its
answer, and the projections read ``world_size``. A value of the wrong type in any of these
is refused here with ``bad-metadata``, naming the field, instead of failing somewhere inside
the analysis. An absent or null section is accepted (a CPU-only trace lists no devices), as
is a field nothing reads, whatever its type.
"""

from __future__ import annotations

import json
from typing import Any

from profiles.trace.stream import TraceFormatError

# the device fields the analysis copies into its answer, besides id and name
DEVICE_COUNTS = ("totalGlobalMem", "computeMajor", "computeMinor", "numSms")
SHOWN_CHARS = 40


def check_metadata(metadata: dict[str, Any]) -> None:
    """Raise TraceFormatError (kind ``bad-metadata``) at the first field of a wrong type."""
    devices = metadata.get("deviceProperties")
    if devices is not None:
        _expect(isinstance(devices, list), "deviceProperties", "an array of objects", devices)
        for index, entry in enumerate(devices):
            _check_device(f"deviceProperties[{index}]", entry)
    distributed = metadata.get("distributedInfo")
    if distributed is not None:
        _expect(isinstance(distributed, dict), "distributedInfo", "an object", distributed)
        _check_count(distributed, "distributedInfo", "rank", least=0)
        _check_count(distributed, "distributedInfo", "world_size", least=1)


def _check_device(path: str, entry: Any) -> None:
    _expect(isinstance(entry, dict), path, "an object", entry)
    # the id is matched against the kernels' device (an int64 column, -1 where none is
    # named): a bool, a string or a negative id would pick the wrong GPU or fail later
    _check_count(entry, path, "id", least=0)
    if "name" in entry:
        name = entry["name"]
        _expect(isinstance(name, str), f"{path}.name", "a string", name)
    for key in DEVICE_COUNTS:
        _check_count(entry, path, key, least=0)


def _check_count(parent: dict[str, Any], path: str, key: str, least: int) -> None:
    """``parent[key]``, where present, is an integer of at least ``least``."""
    if key not in parent:
        return
    value = parent[key]
    what = "a positive integer" if least == 1 else "a non-negative integer"
    _expect(_is_integer(value) and value >= least, f"{path}.{key}", what, value)


def _is_integer(value: Any) -> bool:
    """An int, or a float with an integer value (some JSON writers emit ``3.0``): the
    analysis compares and converts both alike. A bool is not a number here."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _expect(ok: bool, path: str, expected: str, value: Any) -> None:
    if not ok:
        raise TraceFormatError("bad-metadata", f"{path}: expected {expected}, got {shown(value)}")


def shown(value: Any, chars: int = SHOWN_CHARS) -> str:
    """The value as JSON, short: containers by their type, long strings cut (for messages
    that say what was found)."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str) and len(value) > chars:
        return json.dumps(value[:chars] + "...")
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:chars]
