"""Where bytes live: local disk (POSIX fast path) or an object store (fsspec)."""
from logcore.storage.append_file import AppendFile
from logcore.storage.base import Storage
from logcore.storage.local import LocalStorage
from logcore.storage.objectstore import ObjectStorage
from logcore.storage.resolve import open_storage

__all__ = ["AppendFile", "LocalStorage", "ObjectStorage", "Storage", "open_storage"]
