"""How a broker logs in to ZooKeeper, as Kafka's brokers do: SASL DIGEST-MD5 with the username
and password of the `Client` section of a JAAS file (Kafka names the file with the JVM's
`-Djava.security.auth.login.config`, the section with `-Dzookeeper.sasl.clientconfig`; seglog
takes both names as broker settings):

    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka" password="kafka-secret";
    };

The ZooKeeper servers accept the login with SASLAuthenticationProvider and a `Server` section
naming the same user (`user_kafka="kafka-secret"`). Kerberos (Krb5LoginModule) is refused.
Every broker of a cluster must log in as the same user: with `zookeeper.set.acl=true` only that
identity may change what the brokers created (Kafka's rule).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from logcore.errors import InvalidConfigError
from logcore.security.jaas import parse_jaas_file

DIGEST_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
DEFAULT_SECTION = "Client"
LOGIN_FILE_SETTING = "java.security.auth.login.config"
SECTION_SETTING = "zookeeper.sasl.clientconfig"


@dataclass(frozen=True)
class ZooKeeperLogin:
    username: str
    password: str = field(repr=False)
    origin: str                      # "<file>, section <name>": for messages

    @property
    def identity(self) -> str:
        """The id ZooKeeper's ACLs name this login by (scheme sasl)."""
        return self.username

    def sasl_options(self) -> dict[str, str]:
        """kazoo's sasl_options (pure-sasl's DIGEST-MD5)."""
        return {"mechanism": "DIGEST-MD5", "username": self.username, "password": self.password}

    @classmethod
    def from_file(cls, path: str, section: str, where: str) -> "ZooKeeperLogin":
        """The login of `section` in the JAAS file at `path`; InvalidConfigError saying what is
        wrong otherwise (the file's other sections are refused: seglog reads a broker's own
        SASL logins from listener.name.<l>.<mechanism>.sasl.jaas.config, not from this file)."""
        here = f"{where}: {LOGIN_FILE_SETTING}={path}"
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InvalidConfigError(f"{here}: cannot be read: {exc.strerror or exc}") from None
        sections = parse_jaas_file(text, here)
        if section not in sections:
            raise InvalidConfigError(f"{here}: no section {section} (the ZooKeeper login, {SECTION_SETTING})")
        others = sorted(set(sections) - {section})
        if others:
            raise InvalidConfigError(
                f"{here}: section(s) {', '.join(others)} are not read by seglog, which takes from this file only"
                f" the ZooKeeper login ({SECTION_SETTING}={section}); give a broker's SASL logins as"
                " listener.name.<listener>.<mechanism>.sasl.jaas.config and remove the section")
        modules = sections[section]
        if len(modules) != 1 or modules[0].module != DIGEST_MODULE:
            raise InvalidConfigError(
                f"{here}: section {section} must hold one {DIGEST_MODULE} (SASL DIGEST-MD5); Kerberos and other"
                " login modules are not supported")
        login = modules[0]
        if not login.username or login.password is None:
            raise InvalidConfigError(f'{here}: section {section} needs username="..." password="..."')
        return cls(login.username, login.password, f"{path}, section {section}")
