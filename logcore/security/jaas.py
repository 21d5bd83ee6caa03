"""The JAAS configuration Kafka takes inline (`sasl.jaas.config`, and per listener and mechanism
`listener.name.<l>.<mechanism>.sasl.jaas.config`): one login module, its control flag, then
`key="value"` options, ended by `;`:

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

On a broker, PlainLoginModule's `user_<name>="<password>"` options are the PLAIN users; the
`username`/`password` options are what this broker logs in with on inter-broker connections
(either module). A client's config names the user it logs in as.

A JAAS *file* (Kafka's `java.security.auth.login.config`) holds named sections of such modules,
`Client { <module> required key="value" ...; };`, with `//` and `/* */` comments.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from logcore.errors import InvalidConfigError

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
MODULES = {"PLAIN": PLAIN_MODULE, "SCRAM-SHA-256": SCRAM_MODULE, "SCRAM-SHA-512": SCRAM_MODULE,
           "OAUTHBEARER": OAUTHBEARER_MODULE}
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<word>[A-Za-z0-9_.$\-]+)|(?P<eq>=)|(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<end>;))')


@dataclass(frozen=True)
class JaasConfig:
    module: str
    flag: str
    options: dict[str, str]

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's user_<name> options: {name: password}."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def parse_jaas(text: str, setting: str = "sasl.jaas.config") -> JaasConfig:
    """One login module's configuration; InvalidConfigError naming `setting` when malformed
    (the message never repeats the text: it holds passwords)."""
    tokens: list[tuple[str, str]] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise InvalidConfigError(f"{setting}: cannot be read at character {pos + 1}: expected"
                                     ' <LoginModule> required key="value" ...;')
        pos = m.end()
        kind = m.lastgroup
        value = m.group(kind)
        if kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        tokens.append((kind, value))
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word" or tokens[-1][0] != "end":
        raise InvalidConfigError(f'{setting}: expected <LoginModule> required key="value" ...; (one module,'
                                 " ended by ;)")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in _FLAGS:
        raise InvalidConfigError(f"{setting}: {tokens[1][1]!r} is not a control flag ({', '.join(_FLAGS)})")
    options: dict[str, str] = {}
    body = tokens[2:-1]
    i = 0
    while i < len(body):
        if i + 2 >= len(body) or body[i][0] != "word" or body[i + 1][0] != "eq" \
                or body[i + 2][0] not in ("word", "quoted"):
            raise InvalidConfigError(f'{setting}: options must be key="value" pairs (near option {len(options) + 1})')
        options[body[i][1]] = body[i + 2][1]
        i += 3
    return JaasConfig(module, flag, options)


def login_secrets(props: dict[str, str]) -> list[str]:
    """The passwords in the *sasl.jaas.config settings of `props` (for log redaction)."""
    out = []
    for name, value in props.items():
        if not name.endswith("sasl.jaas.config"):
            continue
        try:
            login = parse_jaas(value, name)
        except InvalidConfigError:
            continue
        out.extend(v for k, v in login.options.items() if k == "password" or k.startswith("user_"))
    return out


def parse_jaas_file(text: str, where: str) -> dict[str, tuple[JaasConfig, ...]]:
    """The sections of a JAAS file: {name: its login modules}; InvalidConfigError naming `where`
    (never the text: it holds passwords)."""
    sections: dict[str, tuple[JaasConfig, ...]] = {}
    body = _strip_comments(text, where)
    pos = 0
    header = re.compile(r"\s*([A-Za-z0-9_.\-]+)\s*\{")
    while body[pos:].strip():
        m = header.match(body, pos)
        if m is None:
            raise InvalidConfigError(f"{where}: expected a section `Name {{ <LoginModule> required ...; }};`"
                                     f" at character {pos + 1}")
        name, end = m.group(1), _closing_brace(body, m.end(), where)
        modules = [part.strip() + ";" for part in _split_unquoted(body[m.end():end], ";") if part.strip()]
        if not modules:
            raise InvalidConfigError(f"{where}: section {name} has no login module")
        if name in sections:
            raise InvalidConfigError(f"{where}: section {name} is given twice")
        sections[name] = tuple(parse_jaas(mod, f"{where}: section {name}") for mod in modules)
        tail = re.compile(r"\s*;").match(body, end + 1)
        if tail is None:
            raise InvalidConfigError(f"{where}: section {name} must end with }};")
        pos = tail.end()
    return sections


def _strip_comments(text: str, where: str) -> str:
    out, i, quoted = [], 0, False
    while i < len(text):
        c = text[i]
        if quoted:
            out.append(c)
            if c == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
            out.append(c)
        elif text.startswith("//", i):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                raise InvalidConfigError(f"{where}: a /* comment is not closed")
            i = close + 2
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _closing_brace(body: str, start: int, where: str) -> int:
    quoted = False
    for i in range(start, len(body)):
        c = body[i]
        if c == '"' and (i == 0 or body[i - 1] != "\\"):
            quoted = not quoted
        elif c == "}" and not quoted:
            return i
    raise InvalidConfigError(f"{where}: a section is not closed by }};")


def _split_unquoted(text: str, sep: str) -> list[str]:
    parts, current, quoted = [], [], False
    for i, c in enumerate(text):
        if c == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        if c == sep and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    return parts
