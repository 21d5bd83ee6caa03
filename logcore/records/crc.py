"""CRC-32C (Castagnoli), the checksum of RecordBatch v2 (bytes 21 to the end of a batch)."""
from __future__ import annotations

from crc32c import crc32c as _crc32c


def crc32c(data) -> int:
    """CRC-32C of a bytes-like object, as an unsigned 32-bit int."""
    return _crc32c(data)
