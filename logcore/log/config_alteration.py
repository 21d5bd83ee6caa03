"""A change of a config set by operations, as Kafka's IncrementalAlterConfigs applies them:
SET a value, DELETE it (back to its default), APPEND to or SUBTRACT from a list value (the
current override, else the key's default). Nothing here knows where the set is kept.
"""
from __future__ import annotations

from typing import Callable, Iterable

from logcore.errors import InvalidConfigError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OPERATIONS = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def check_no_duplicates(names: Iterable[str]) -> None:
    seen, twice = set(), []
    for name in names:
        if name in seen:
            twice.append(name)
        seen.add(name)
    if twice:
        raise InvalidConfigError(f"Error due to duplicate config keys: {', '.join(sorted(set(twice)))}")


def altered(current: dict[str, str], changes: Iterable[tuple[str, int, str | None]],
            list_default: Callable[[str], str | None]) -> dict[str, str]:
    """`current` with each (name, operation, value) applied in order. `list_default(name)`: the
    default of a list-typed key in its string form, None when `name` is not a list (APPEND and
    SUBTRACT are then refused, as Kafka does)."""
    out = dict(current)
    for name, op, value in changes:
        if op == SET:
            if value is None:
                raise InvalidConfigError(f"SET of {name} needs a value")
            out[name] = value
        elif op == DELETE:
            out.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            default = list_default(name)
            if default is None:
                raise InvalidConfigError(f"Config value {OPERATIONS[op].lower()} is not allowed for"
                                         f" config key: {name}")
            items = _items(out.get(name, default))
            given = _items(value or "")
            if op == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            out[name] = ",".join(items)
        else:
            raise InvalidConfigError(f"Unknown config operation {op} for {name}")
    return out


def _items(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]
