"""Fetch responses encoded as pieces: encoded fields, and the records of local segments as open
file ranges that the server sends with sendfile (zero-copy).

kio encodes a whole response into one buffer, which would copy every fetched byte twice (into the
buffer, then into the transport's). This encoder writes the fields of Fetch v4..v16 by hand and
leaves each partition's records, after their length prefix, as a separate piece: a FileSlice
(sent with sendfile), or bytes (remote-tier or object-store data, small local reads). It is C
(logcore/records/fetchwire.c): on three brokers the leader answers four or more fetches per
record, and field by field in Python a response cost 4-6 us. The byte layout is Kafka's FetchResponse schema, the same that kio writes (tests compare the two); the
tagged fields are written when set (v12+: a follower's diverging epoch, the current leader
after NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH); the snapshot id and node endpoints are
never set and left out, as kio leaves out a tagged field at its default.
"""
from __future__ import annotations

from dataclasses import dataclass

from logcore.log.file_slice import FileSlice
from logcore.records import wire_codec

INLINE_MAX = 64 * 1024        # bytes records up to this size are copied into the field buffer

Piece = bytes | FileSlice


@dataclass
class EncodedResponse:
    """A whole response frame (size prefix included) as pieces to send in order."""
    pieces: list[Piece]

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.pieces)

    def slices(self) -> list[FileSlice]:
        return [p for p in self.pieces if isinstance(p, FileSlice)]

    def close(self) -> None:
        for piece in self.slices():
            piece.close()

    def to_bytes(self) -> bytes:
        """The frame as one buffer (copies the slices: for tests and transports without sendfile)."""
        return b"".join(p.read() if isinstance(p, FileSlice) else p for p in self.pieces)


def encode_fetch_response(correlation_id: int, version: int, body: dict) -> EncodedResponse:
    """Encode `body` (the Fetch handler's dict: Kafka field names) as Fetch response `version`."""
    return EncodedResponse(wire_codec.encode_fetch_response(correlation_id, version, body, FileSlice, INLINE_MAX))
