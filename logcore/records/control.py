"""Control records: the key and value codecs of transaction markers and other control types."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from logcore.errors import CorruptRecordError

_KEY = struct.Struct(">hh")          # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


def encode_control_key(control_type: ControlType | int) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, int(control_type))


def parse_control_type(key: bytes | None) -> ControlType:
    """Type of a control record from its key; unknown types map to UNKNOWN (readers ignore them)."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record key must be at least 4 bytes, got {None if key is None else len(key)}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    try:
        return ControlType(type_id) if type_id >= 0 else ControlType.UNKNOWN
    except ValueError:
        return ControlType.UNKNOWN


@dataclass(frozen=True)
class EndTransactionMarker:
    """An ABORT or COMMIT marker closing a producer's transaction."""

    control_type: ControlType
    coordinator_epoch: int = 0

    def __post_init__(self) -> None:
        if self.control_type not in (ControlType.ABORT, ControlType.COMMIT):
            raise ValueError(f"end-transaction marker type must be ABORT or COMMIT, got {self.control_type!r}")

    def key(self) -> bytes:
        return encode_control_key(self.control_type)

    def value(self) -> bytes:
        return _END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, self.coordinator_epoch)

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> "EndTransactionMarker":
        control_type = parse_control_type(key)
        if control_type not in (ControlType.ABORT, ControlType.COMMIT):
            raise CorruptRecordError(f"control record of type {control_type.name} is not an end-transaction marker")
        if value is None or len(value) < _END_TXN_VALUE.size:
            raise CorruptRecordError(
                f"end-transaction marker value must be at least 6 bytes, got {None if value is None else len(value)}")
        version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
        if version < 0:
            raise CorruptRecordError(f"end-transaction marker has negative version {version}")
        return cls(control_type, coordinator_epoch)
