"""The shipped stacks by name, for tests that time a stack's work directly (requests resolve
theirs on the app's knowledge: :func:`service.engine.estimating.software.resolve`)."""

from __future__ import annotations

import functools

from knowledge import load_knowledge
from service.engine.estimating.software import Stack, resolve


@functools.cache
def shipped(name: str) -> Stack:
    return resolve(load_knowledge(), name)
