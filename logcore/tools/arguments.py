"""What the `seglog` commands share: their key=value arguments, storage options and
.properties files, the log root they open, and stdout as bytes.
"""
from __future__ import annotations

import sys
from typing import BinaryIO, Sequence, TextIO

from logcore.errors import InvalidConfigError, NotALogRootError
from logcore.storage.options import nested_storage_options


def _key_value(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InvalidConfigError(f"{what} must be key=value, got {text!r}")
    return key, value


def parse_storage_options(items: Sequence[str] | None) -> dict:
    """`--storage-option k=v` pairs -> fsspec options (see logcore.storage.options)."""
    return nested_storage_options((_key_value(item, "--storage-option") for item in items or ()),
                                  "--storage-option")


def _configs(items: Sequence[str] | None, option: str = "--config") -> dict[str, str]:
    configs: dict[str, str] = {}
    for item in items or ():
        key, value = _key_value(item, option)
        configs[key] = value
    return configs


def _properties_file(path: str | None, option: str) -> str | None:
    """A .properties file given on the command line: it must exist (load_properties would read a
    missing path as the text of a properties file)."""
    import os

    if path is None:
        return None
    if not os.path.exists(path):
        raise InvalidConfigError(f"{option} {path}: no such file")
    if not os.path.isfile(path):
        raise InvalidConfigError(f"{option} {path}: not a file")
    return path


def _unescape_separator(text: str) -> str:
    # Lets a shell user type --key-separator '\t' for a tab, as Kafka's properties do.
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _open_root(args, *, create: bool = False, read_only: bool = False, defaults: dict | None = None):
    from logcore.log.log_root import LogRoot
    import logcore.tiered  # noqa: F401 - registers the remote tier roots that enable tiering use

    options = parse_storage_options(args.storage_option)
    if not create:
        return LogRoot.open(args.root, storage_options=options, read_only=read_only)
    try:
        return LogRoot.open(args.root, storage_options=options)
    except NotALogRootError:
        # Only an empty or missing location becomes a new root: nothing is written elsewhere.
        return LogRoot.open(args.root, storage_options=options, create=True, defaults=defaults)


def _stdout_bytes() -> BinaryIO:
    return getattr(sys.stdout, "buffer", None) or _TextAsBinary(sys.stdout)


class _TextAsBinary:
    """A binary facade over a text stream (a StringIO in tests without .buffer)."""

    def __init__(self, text: TextIO):
        self.text = text

    def write(self, data: bytes) -> int:
        self.text.write(data.decode("utf-8", errors="replace"))
        return len(data)

    def flush(self) -> None:
        self.text.flush()
