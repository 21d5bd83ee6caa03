"""What the `seglog` commands share: their key=value arguments, storage options, .properties
and JSON files, the log root they open, and stdout as bytes.
"""
from __future__ import annotations

import argparse
import difflib
import sys
from typing import BinaryIO, Sequence, TextIO

from logcore.errors import InvalidConfigError, NotALogRootError
from logcore.storage.options import nested_storage_options


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose unknown flags are an error of the command they were given to: its
    usage, and the closest flag it has ("did you mean --partitions?"), as a user who misspelled
    one needs. (argparse passes a subcommand's unknown arguments up to the top-level parser,
    whose usage does not show the subcommand's flags.)"""

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(self.unknown_message(extras))
        return namespace, extras

    def error(self, message: str):
        # A misspelled flag often makes a required one look missing: name the misspelling too.
        if message.startswith("the following arguments are required") or message.startswith("one of the arguments"):
            flags = self._flags()
            unknown = [t for t in getattr(self, "_given", ()) if t.startswith("--") and not any(
                f == t.split("=", 1)[0] or f.startswith(t.split("=", 1)[0]) for f in flags)]
            if unknown:
                message += "\n" + self.unknown_message(unknown)
        super().error(message)

    def _flags(self) -> list[str]:
        return [s for action in self._actions for s in action.option_strings if s.startswith("--")]

    def unknown_message(self, extras: Sequence[str]) -> str:
        flags = self._flags()
        hints = []
        for token in extras:
            if not token.startswith("-") or token == "-":
                continue
            close = difflib.get_close_matches(token.split("=", 1)[0], flags, n=1, cutoff=0.6)
            if close:
                hints.append(f"{token.split('=', 1)[0]}: did you mean {close[0]}?")
        return "unrecognized arguments: " + " ".join(extras) + ("".join(f"\n  {h}" for h in hints))


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


def json_file(path: str, option: str):
    """The document of a JSON file given as `option` (Kafka's tools take their partition lists
    so); a file that cannot be read or is not JSON is an error naming both."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise InvalidConfigError(f"{option} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidConfigError(f"{option} {path}: not JSON: {exc}") from None


def offset_option(text: str) -> int:
    """A numeric --offset (the callers handle earliest and latest)."""
    try:
        offset = int(text)
    except ValueError:
        raise InvalidConfigError(f"--offset must be a number, earliest or latest, got {text!r}") from None
    if offset < 0:
        raise InvalidConfigError(f"--offset must be >= 0, got {offset}")
    return offset


def _unescape_separator(text: str) -> str:
    # Lets a shell user type --key-separator '\t' for a tab, as Kafka's properties do.
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _open_root(args, *, create: bool = False, read_only: bool = False, defaults: dict | None = None):
    from logcore.log.log_root import LogRoot
    from logcore.tiered import install_remote_tier
    install_remote_tier()

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
