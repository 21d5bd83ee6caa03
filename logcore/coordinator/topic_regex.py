"""A consumer group's topic regular expression (KIP-848's SubscribedTopicRegex) in Kafka's
syntax, RE2/J, matched with Python's `re` against whole topic names.

RE2 is, for what topic names need, a subset of Python's syntax; a pattern is checked for what
RE2 refuses and Python would accept, so that a regex Kafka answers INVALID_REGULAR_EXPRESSION
is refused here too: lookarounds `(?=` `(?!` `(?<=` `(?<!`, backreferences (`\\1`, `(?P=n)`),
atomic groups `(?>`, conditionals `(?(`, comments `(?#`, possessive quantifiers (`a*+`),
`\\Z`, and inline flags other than i, m, s. What RE2 spells differently is translated: `\\z`
(end of text), `\\Q...\\E` (literal text), `(?<name>...)` and the POSIX classes inside
brackets (`[[:alpha:]]`). RE2's Unicode classes (`\\pL`, `\\p{Greek}`) and its ungreedy flag
`U` are refused with a message saying so (Python's `re` has neither).
"""
from __future__ import annotations

import functools
import re
from typing import Callable

from logcore.errors import SegLogError

_POSIX = {"alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
          "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~",
          "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": "0-9A-Za-z_",
          "xdigit": "0-9A-Fa-f"}


class InvalidTopicRegex(SegLogError):
    """A pattern Kafka's RE2/J would refuse (or this translation cannot take)."""


@functools.lru_cache(maxsize=1024)
def compile_topic_regex(pattern: str) -> re.Pattern:
    """The compiled pattern; InvalidTopicRegex (its message says why) when it is not valid."""
    try:
        return re.compile(_translate(pattern))
    except re.error as exc:
        raise InvalidTopicRegex(f"{exc}") from None


def matching(pattern: str, names, excluded=frozenset(), visible: Callable[[str], bool] | None = None) -> set[str]:
    """The names the whole of which `pattern` matches (Java's Matcher.matches), but `excluded`
    and those `visible` refuses (Kafka leaves out of a regex's matches the topics the member's
    principal may not DESCRIBE; None: every topic is visible, as without an authorizer)."""
    regex = compile_topic_regex(pattern)
    found = {n for n in names if n not in excluded and regex.fullmatch(n)}
    return found if visible is None else {n for n in found if visible(n)}


def _translate(pattern: str) -> str:
    out: list[str] = []
    quantified = False                  # the last thing written is a repetition operator
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        counted = re.match(r"\{\d+(?:,\d*)?\}", pattern[i:]) if c == "{" else None
        if c == "+" and quantified:
            raise InvalidTopicRegex(f"bad repetition operator {out[-1]}+ at position {i - len(out[-1])}"
                                    " (possessive quantifiers are not RE2 syntax)")
        if c == "\\":
            piece, i = _escape(pattern, i)
        elif c == "[":
            piece, i = _bracket(pattern, i)
        elif c == "(" and pattern.startswith("(?", i):
            piece, i = _group(pattern, i)
        elif counted is not None:
            piece, i = counted.group(0), i + len(counted.group(0))
        else:
            piece, i = c, i + 1
        # `a*?` is lazy, not a repetition of a repetition
        quantified = (counted is not None or piece in ("*", "+", "?")) and not (piece == "?" and quantified)
        out.append(piece)
    return "".join(out)


def _escape(pattern: str, i: int) -> tuple[str, int]:
    """The escape at `i` (a backslash), translated; and the index after it."""
    if i + 1 >= len(pattern):
        raise InvalidTopicRegex("trailing backslash at end of expression")
    c = pattern[i + 1]
    if c.isdigit() and c != "0":
        raise InvalidTopicRegex(f"invalid escape sequence \\{c} at position {i}"
                                " (backreferences are not RE2 syntax)")
    if c == "Q":
        end = pattern.find("\\E", i + 2)
        literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
        return re.escape(literal), len(pattern) if end < 0 else end + 2
    if c == "z":
        return "\\Z", i + 2
    if c in "ZG":
        raise InvalidTopicRegex(f"invalid escape sequence \\{c} at position {i}")
    if c in "pP":
        raise InvalidTopicRegex(f"Unicode character classes (\\{c}) are not supported by this broker")
    if c == "C":
        raise InvalidTopicRegex(f"\\C (any byte) at position {i} is not supported by this broker")
    return pattern[i:i + 2], i + 2


def _bracket(pattern: str, i: int) -> tuple[str, int]:
    """The character class starting at `i`, with POSIX classes spelled out."""
    out = ["["]
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        out.append("^")
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        out.append("\\]")
        j += 1
    while j < len(pattern):
        c = pattern[j]
        if c == "]":
            out.append("]")
            return "".join(out), j + 1
        if c == "\\":
            piece, j = _escape(pattern, j)
            out.append(piece)
            continue
        if pattern.startswith("[:", j):
            end = pattern.find(":]", j + 2)
            name = pattern[j + 2:end] if end > 0 else ""
            if name.startswith("^"):
                raise InvalidTopicRegex(f"negated POSIX class [:{name}:] is not supported by this broker")
            if name in _POSIX:
                out.append(_POSIX[name])
                j = end + 2
                continue
            if end > 0 and name.isalpha():
                raise InvalidTopicRegex(f"invalid character class range [:{name}:]")
        if c == "[":
            out.append("\\[")                  # a literal in RE2; Python warns of nested sets
            j += 1
            continue
        out.append(c)
        j += 1
    raise InvalidTopicRegex(f"missing closing ] of the character class at position {i}")


def _group(pattern: str, i: int) -> tuple[str, int]:
    """The opening of a `(?` group at `i`, checked; what it is in Python and the index after."""
    rest = pattern[i + 2:]
    for opening, what in (("=", "lookahead"), ("!", "negative lookahead"), ("<=", "lookbehind"),
                          ("<!", "negative lookbehind"), (">", "atomic group"), ("(", "conditional"),
                          ("#", "comment"), ("P=", "backreference"), ("P>", "recursion")):
        if rest.startswith(opening):
            raise InvalidTopicRegex(f"invalid or unsupported Perl syntax (?{opening} ({what}) at position {i}")
    if rest.startswith("P<"):
        return "(?P<", i + 4
    if rest.startswith("<"):
        return "(?P<", i + 3                    # RE2's (?<name>re)
    flags = re.match(r"([A-Za-z]*)(?:-([A-Za-z]*))?([:)])", rest)
    if flags is None:
        raise InvalidTopicRegex(f"missing argument to repetition operator or invalid group at position {i}")
    for f in (flags.group(1) or "") + (flags.group(2) or ""):
        if f == "U":
            raise InvalidTopicRegex("the ungreedy flag (?U) is not supported by this broker")
        if f not in "ims":
            raise InvalidTopicRegex(f"invalid or unsupported Perl syntax: flag {f} at position {i}")
    return "(?" + flags.group(0), i + 2 + len(flags.group(0))
