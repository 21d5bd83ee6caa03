"""RecordBatch v2 codec: varints, CRC-32C, compression, control records, Arrow decode."""
from logcore.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    Record,
    TimestampType,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
    parse_header,
    records_section,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from logcore.records.compression import Compression, compress, decompress
from logcore.records.control import ControlType, EndTransactionMarker, parse_control_type
from logcore.records.crc import crc32c

__all__ = [
    "HEADER_SIZE", "BatchHeader", "Record", "TimestampType", "build_batch", "build_control_batch",
    "decode_records", "iter_batches", "parse_header", "records_section", "set_base_offset",
    "set_log_append_time", "set_partition_leader_epoch", "Compression", "compress", "decompress",
    "ControlType", "EndTransactionMarker", "parse_control_type", "crc32c", "batches_to_arrow",
]


def __getattr__(name: str):
    # pyarrow and the C extension load only when the Arrow path is used.
    if name == "batches_to_arrow":
        from logcore.records.arrow import batches_to_arrow
        return batches_to_arrow
    if name == "_fastcodec":
        # `from logcore.records import _fastcodec` asks here before importing the submodule:
        # import it, and say what is wrong when this folder has no compiled codec.
        import importlib
        import os
        try:
            return importlib.import_module("logcore.records._fastcodec")
        except ModuleNotFoundError as exc:
            if exc.name != "logcore.records._fastcodec":
                raise
            raise ImportError(
                f"logcore's compiled codec (_fastcodec) is missing from {os.path.dirname(__file__)}: this"
                " is a source checkout that was not built. Build it in place (pip install -e .), or run"
                " from another folder so that the installed seglog is imported instead of the"
                " checkout") from None
    raise AttributeError(name)
