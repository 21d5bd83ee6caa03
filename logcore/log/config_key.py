"""A config key: its Kafka name, type, default, validator and doc, and how a property value is
parsed and checked against it (Kafka's ConfigDef types and validators).

The declaration tables (`LogConfig`, `MaintenanceConfig` in config.py, `TieredConfig`) hold
`ConfigKey`s as class attributes; as a descriptor a key reads its parsed value from the table
instance's `value(name)`, the one protocol the tables share.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterable

from logcore.errors import InvalidConfigError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT32_MIN = -(2**31)
INT64_MIN = -(2**63)


class ConfigType(Enum):
    """Kafka's ConfigDef types that topic configs use."""

    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"


def parse_value(name: str, ctype: ConfigType, raw: Any) -> Any:
    """Parse a property value (a string, or an already typed value) as Kafka's ConfigDef does."""
    if ctype in (ConfigType.INT, ConfigType.LONG):
        if isinstance(raw, bool):
            raise _bad(name, raw, f"expected a whole number ({ctype.value})")
        if isinstance(raw, int):
            value = raw
        else:
            text = str(raw).strip()
            if not re.fullmatch(r"[+-]?\d+", text):
                raise _bad(name, raw, f"expected a whole number ({ctype.value})")
            value = int(text)
        lo, hi = (INT32_MIN, INT32_MAX) if ctype is ConfigType.INT else (INT64_MIN, INT64_MAX)
        if not lo <= value <= hi:
            raise _bad(name, raw, f"out of range for a {ctype.value} ({lo}..{hi})")
        return value
    if ctype is ConfigType.DOUBLE:
        if isinstance(raw, bool):
            raise _bad(name, raw, "expected a number (double)")
        try:
            return float(str(raw).strip()) if not isinstance(raw, (int, float)) else float(raw)
        except ValueError:
            raise _bad(name, raw, "expected a number (double)") from None
    if ctype is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise _bad(name, raw, "expected true or false")
        return text == "true"
    if ctype is ConfigType.LIST:
        if isinstance(raw, (list, tuple)):
            return tuple(str(v).strip() for v in raw)
        text = str(raw).strip()
        return tuple(part.strip() for part in text.split(",")) if text else ()
    return str(raw).strip()


def _bad(name: str, value: Any, reason: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value!r} for configuration {name}: {reason}")


def format_value(ctype: ConfigType, value: Any) -> str:
    """The canonical property-file form of a typed value."""
    if ctype is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if ctype is ConfigType.LIST:
        return ",".join(value)
    if ctype is ConfigType.DOUBLE:
        return repr(float(value))
    return str(value)


# --- validators: each checks a parsed value and says in words what it allows ---------------------

@dataclass(frozen=True)
class Validator:
    check: Callable[[Any], bool]
    allowed: str            # what is allowed, in words, for errors and the docs table

    def __call__(self, name: str, value: Any) -> None:
        if not self.check(value):
            raise _bad(name, _format_any(value), f"must be {self.allowed}")


def _format_any(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def at_least(minimum: int | float) -> Validator:
    return Validator(lambda v: v >= minimum, f"at least {minimum}")


def between(lo: int | float, hi: int | float) -> Validator:
    return Validator(lambda v: lo <= v <= hi, f"between {lo} and {hi}")


def one_of(*choices: str) -> Validator:
    return Validator(lambda v: v in choices, "one of " + ", ".join(choices))


def list_of(*choices: str, allow_empty: bool = False) -> Validator:
    def check(values: tuple[str, ...]) -> bool:
        if not values and not allow_empty:
            return False
        return all(v in choices for v in values) and len(set(values)) == len(values)

    return Validator(check, "a comma-separated list of " + ", ".join(choices) + " (no repeats)")


def replica_list() -> Validator:
    """Replication throttles: `*` alone, or `partition:brokerId` entries (Kafka's
    ThrottledReplicaListValidator)."""
    def check(values: tuple[str, ...]) -> bool:
        if values == ("*",):
            return True
        return all(_is_replica(v) for v in values)

    return Validator(check, "the literal '*' or a list of replicas in the following format:"
                     " [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def _is_replica(entry: str) -> bool:
    partition, sep, broker = entry.partition(":")
    return bool(sep) and partition.isdigit() and broker.isdigit()


def level_or(default_marker: int, lo: int, hi: int) -> Validator:
    """Compression levels: a range, or the codec's 'use the library default' marker."""
    return Validator(lambda v: v == default_marker or lo <= v <= hi,
                     f"{default_marker} or between {lo} and {hi}")


class ConfigKey:
    """One declared config; as a class attribute of a declaration table it is the typed accessor."""

    def __init__(self, name: str, ctype: ConfigType, default: Any, doc: str, *,
                 validator: Validator | None = None, broker_names: tuple[str, ...] = (),
                 category: str = "log"):
        self.name = name
        self.type = ctype
        self.default = parse_value(name, ctype, default)
        self.validator = validator
        self.doc = doc
        # broker-level (root) names that default this config, highest precedence first;
        # an entry "name*factor" is in units of `factor` ms (log.retention.hours*3600000).
        self.broker_names = broker_names
        self.category = category
        self.attr = ""                      # set by __set_name__
        if validator is not None:
            validator(name, self.default)

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def __get__(self, instance: "Any", owner: type) -> Any:
        if instance is None:
            return self
        return instance.value(self.name)

    def parse(self, raw: Any) -> Any:
        """Parse and validate one value; errors name this config, the value and what is allowed."""
        value = parse_value(self.name, self.type, raw)
        if self.validator is not None:
            self.validator(self.name, value)
        return value

    def format(self, value: Any) -> str:
        return format_value(self.type, value)

    def broker_name_list(self) -> list[str]:
        return [n.split("*")[0] for n in self.broker_names]


def unknown_message(name: str, known: Iterable[str], what: str = "topic config") -> str:
    message = f"Unknown {what} {name!r}"
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if close:
        message += f"; did you mean {close[0]!r}?"
    return message
