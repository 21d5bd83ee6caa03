"""An attribute an object answers from a collaborator it holds: `transport =
forwarded("_conn.transport", "...")` reads `self._conn.transport`, read-only, as a property
whose whole body is that return would, without writing the property out for each fact.
The getter is operator.attrgetter: no Python frame on the read (some are read per request).
"""
from __future__ import annotations

from operator import attrgetter


def forwarded(path: str, doc: str) -> property:
    """A read-only property answering `self.<path>` (a dotted path through collaborators)."""
    return property(attrgetter(path), doc=doc)
