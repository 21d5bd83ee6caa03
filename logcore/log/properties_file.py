"""Java `.properties` files, read as java.util.Properties does (comments, separators, escapes,
line continuations), plus Kafka's `${file:PATH:KEY}` references to a credentials file."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

from logcore.errors import InvalidConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first physical line number, logical line): joins lines ending in an odd number of
    backslashes, dropping the continuation line's leading whitespace, as java.util.Properties does."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(" \t\f")
        if line.startswith(("#", "!")) or not line:
            i += 1
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i + 1 < len(lines):
            i += 1
            line = line[:-1] + lines[i].lstrip(" \t\f")
        if (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]                       # continuation at end of file
        i += 1
        yield start + 1, line


def _unescape(text: str, where: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 >= len(text):
            out.append(c)
            i += 1
            continue
        n = text[i + 1]
        if n == "u":
            digits = text[i + 2:i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise InvalidConfigError(f"Malformed \\uxxxx escape {text[i:i + 6]!r} ({where})")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(n, n))
        i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def load_properties(source: str | os.PathLike) -> dict[str, str]:
    """Parse Java .properties: a path (os.PathLike, or a one-line str naming an existing file) or
    the text itself. Comments start with # or !; `key=value`, `key: value` or `key value`;
    backslash escapes and line continuations."""
    if isinstance(source, os.PathLike) or (
            isinstance(source, str) and "\n" not in source and os.path.isfile(source)):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InvalidConfigError(f"Properties file not found: {path}") from None
        origin = str(path)
    else:
        text, origin = str(source), "<text>"
    props: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        where = f"{origin} line {lineno}"
        raw_key, raw_value = _split_key_value(line)
        props[_unescape(raw_key, where)] = _unescape(raw_value, where)
    base = Path(origin).parent if origin != "<text>" else Path.cwd()
    for name, value in props.items():
        if value.startswith("${file:") and value.endswith("}"):
            props[name] = _file_reference(name, value, base)
    return props


def _file_reference(name: str, value: str, base: Path) -> str:
    """`${file:PATH:KEY}` (Kafka's FileConfigProvider syntax): KEY of the properties file PATH
    (relative to the file that refers to it), which only its owner may read (mode 0600 or
    stricter): credentials stay out of the main config and out of any log root."""
    path_text, sep, key = value[len("${file:"):-1].rpartition(":")
    if not sep or not path_text or not key:
        raise InvalidConfigError(f"{name}: a file reference is ${{file:PATH:KEY}}, got a malformed one")
    path = Path(path_text)
    if not path.is_absolute():
        path = base / path
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InvalidConfigError(f"{name}: the referenced file {path} does not exist") from None
    if os.name == "posix" and mode & 0o077:
        raise InvalidConfigError(
            f"{name}: the referenced file {path} has mode {mode & 0o777:04o}; a file holding"
            " credentials must be readable by its owner only (chmod 600)")
    found = load_properties(path)
    if key not in found:
        raise InvalidConfigError(f"{name}: the referenced file {path} has no key {key!r}")
    return found[key]
