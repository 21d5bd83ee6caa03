"""Kafka's topic-name rules (org.apache.kafka.common.internals.Topic): what a name may hold,
and which names collide ('.' and '_' map to the same metric name)."""
from __future__ import annotations

import re
from typing import Iterable

from logcore.errors import InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError with the reason when Kafka would reject `name`."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters "
            f"({len(name)} given), topic name: {name[:40]}...")
    if not _LEGAL_TOPIC.fullmatch(name):
        bad = sorted({c for c in name if not re.fullmatch(r"[a-zA-Z0-9._-]", c)})
        raise InvalidTopicError(
            f"Topic name {name!r} is illegal, it contains a character other than ASCII "
            f"alphanumerics, '.', '_' and '-' (found {''.join(bad)!r})")


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """'.' and '_' map to the same metric name in Kafka, so topics differing only there collide."""
    return name.replace(".", "_")


def topic_collision_warning(name: str, existing: Iterable[str] = ()) -> str | None:
    """A warning when `name` collides with an existing topic, or could collide in future (Kafka's
    kafka-topics warning for names holding '.' or '_'); None when neither applies."""
    unified = unify_collision_chars(name)
    for other in existing:
        if other != name and unify_collision_chars(other) == unified:
            return f"Topic {name!r} collides with existing topic {other!r} ('.' and '_' are equivalent)"
    if has_collision_chars(name):
        return ("WARNING: Due to limitations in metric names, topics with a period ('.') or "
                "underscore ('_') could collide. To avoid issues it is best to use either, but not both.")
    return None


def colliding_topic(name: str, existing: Iterable[str]) -> str | None:
    """The existing topic that `name` collides with on '.' vs '_', if any."""
    unified = unify_collision_chars(name)
    for other in existing:
        if other != name and unify_collision_chars(other) == unified:
            return other
    return None
