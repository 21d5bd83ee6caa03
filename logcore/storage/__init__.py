"""Where bytes live: local disk (POSIX fast path) or an object store (fsspec)."""
from logcore.storage.append_file import AppendFile
from logcore.storage.base import Storage
from logcore.storage.local import LocalStorage
from logcore.storage.resolve import open_storage

__all__ = ["AppendFile", "LocalStorage", "ObjectStorage", "Storage", "open_storage"]


def __getattr__(name: str):
    # The object store (fsspec, asyncio) loads on first use: a process that only reads local
    # logs (a Spark task) does not carry its modules.
    if name == "ObjectStorage":
        from logcore.storage.objectstore import ObjectStorage
        return ObjectStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
