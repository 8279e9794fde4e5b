"""The workload profiler: what a model description or a traced run needs (FLOPs, bytes, memory).

A plain library (no Flask): :func:`profiles.description.resolve` turns a description into a
model spec, :func:`profiles.profile.profile` counts one step of a workload on it.
"""

from profiles.errors import InvalidDescription, ProfileError, ProfileTooSlow, UnknownModel

__all__ = ["InvalidDescription", "ProfileError", "ProfileTooSlow", "UnknownModel"]
