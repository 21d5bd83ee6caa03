"""The client side of a secured connection (logcore.wire.client's `security=`): TLS from a
client's ssl.* settings, then the SASL login after ApiVersions, with Kafka's client property
names (`security.protocol`, `ssl.*`, `sasl.mechanism`, `sasl.jaas.config`), as the CLI's
--command-config and the Spark connector's kafka.* options give them; brokers build theirs from
the inter-broker listener's settings.

A session with a lifetime (the broker's connections.max.reauth.ms, KIP-368) is re-authenticated
on the same connection before it ends: the connection asks `reauth_due` before each request.
"""
from __future__ import annotations

import ssl
import time
from dataclasses import dataclass

from logcore.errors import InvalidConfigError
from logcore.security.jaas import MODULES, parse_jaas
from logcore.security.listener import PLAINTEXT, PROTOCOLS, SASL_PLAINTEXT, SASL_SSL, SSL
from logcore.security.plain import plain_token
from logcore.security.scram import SaslFailure, ScramClient
from logcore.security.security_config import check_mechanism
from logcore.security.tls_context import ClientTls, client_context
from logcore.wire import error_codes as E

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
REAUTH_AT = 0.85         # re-authenticate once this share of the session lifetime has passed

CLIENT_SSL_KEYS = ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
                   "ssl.truststore.certificates", "ssl.keystore.type", "ssl.keystore.location",
                   "ssl.keystore.password", "ssl.key.password", "ssl.keystore.certificate.chain",
                   "ssl.keystore.key", "ssl.endpoint.identification.algorithm", "ssl.enabled.protocols",
                   "ssl.protocol")
CLIENT_SASL_KEYS = ("sasl.mechanism", "sasl.jaas.config")
CLIENT_SECURITY_KEYS = ("security.protocol",) + CLIENT_SSL_KEYS + CLIENT_SASL_KEYS


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str
    fixed_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    reloading: ClientTls | None = None      # the inter-broker listener's: follows its dynamic stores

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for a new connection (None: no TLS)."""
        return self.reloading.context if self.reloading is not None else self.fixed_context

    @classmethod
    def from_properties(cls, props: dict[str, str], where: str) -> "ClientSecurity | None":
        """From Kafka client properties; None for PLAINTEXT with nothing else set. Keys outside
        CLIENT_SECURITY_KEYS are not looked at (the caller checks them)."""
        protocol = (props.get("security.protocol") or PLAINTEXT).strip().upper()
        if protocol not in PROTOCOLS:
            raise InvalidConfigError(f"{where}: security.protocol={props.get('security.protocol')}: must be one of"
                                     f" {', '.join(PROTOCOLS)}")
        ssl_given = [k for k in CLIENT_SSL_KEYS if props.get(k)]
        sasl_given = [k for k in CLIENT_SASL_KEYS if props.get(k)]
        tls = protocol in (SSL, SASL_SSL)
        sasl = protocol in (SASL_PLAINTEXT, SASL_SSL)
        if ssl_given and not tls:
            raise InvalidConfigError(f"{where}: {', '.join(ssl_given)} given but security.protocol={protocol}"
                                     " does not use TLS (SSL or SASL_SSL)")
        if sasl_given and not sasl:
            raise InvalidConfigError(f"{where}: {', '.join(sasl_given)} given but security.protocol={protocol}"
                                     " does not use SASL (SASL_PLAINTEXT or SASL_SSL)")
        if protocol == PLAINTEXT:
            return None
        context = client_context({k: props[k] for k in CLIENT_SSL_KEYS if k in props}, where) if tls else None
        if not sasl:
            return cls(protocol, context)
        if not props.get("sasl.mechanism"):
            raise InvalidConfigError(f"{where}: security.protocol={protocol} needs sasl.mechanism (PLAIN,"
                                     " SCRAM-SHA-256 or SCRAM-SHA-512; Kafka's default GSSAPI is not supported)")
        mechanism = check_mechanism(props["sasl.mechanism"], f"{where}: sasl.mechanism")
        if not props.get("sasl.jaas.config"):
            raise InvalidConfigError(f'{where}: sasl.mechanism={mechanism} needs sasl.jaas.config ({MODULES[mechanism]}'
                                     ' required username="..." password="...";)')
        login = parse_jaas(props["sasl.jaas.config"], f"{where}: sasl.jaas.config")
        if login.module != MODULES[mechanism]:
            raise InvalidConfigError(f"{where}: sasl.jaas.config: {mechanism} logs in with {MODULES[mechanism]},"
                                     f" not {login.module}")
        if not login.username or login.password is None:
            raise InvalidConfigError(f'{where}: sasl.jaas.config needs username="..." and password="..."')
        return cls(protocol, context, mechanism, login.username, login.password)

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    @property
    def sasl(self) -> bool:
        return self.mechanism is not None

    def server_hostname(self, host: str) -> str | None:
        return host if self.ssl_context is not None else None

    # ------------------------------------------------------------------ the SASL login
    def _steps(self):
        """A generator of client tokens: each yield gets the server's answer to the last token."""
        if self.mechanism == "PLAIN":
            yield plain_token(self.username, self.password)
            return
        client = ScramClient(self.mechanism, self.username, self.password)
        server_first = yield client.first()
        server_final = yield client.final(server_first)
        client.verify(server_final)

    def _failed(self, conn, message: str, code: int = E.SASL_AUTHENTICATION_FAILED):
        from logcore.wire.client import KafkaError
        conn.close()
        return KafkaError(f"{conn.where()}: SASL {self.mechanism} login as {self.username} failed: {message}", code)

    def _handshake_checked(self, conn, body) -> None:
        if body.error_code != 0:
            raise self._failed(conn, f"SaslHandshake: error {int(body.error_code)} (the broker enables"
                                     f" {', '.join(body.mechanisms) or 'no mechanism'})", int(body.error_code))

    def _answer(self, conn, body) -> bytes:
        if body.error_code != 0:
            raise self._failed(conn, body.error_message or f"error {int(body.error_code)}", int(body.error_code))
        return bytes(body.auth_bytes)

    def _login(self, conn):
        """The SASL login as a conversation the connection carries: yields (api key, request
        body), is sent each response body, and returns the monotonic time to re-authenticate
        at (None: the session does not expire)."""
        self._handshake_checked(conn, (yield SASL_HANDSHAKE, {"mechanism": self.mechanism}))
        steps = self._steps()
        token, lifetime = next(steps), 0
        try:
            while True:
                body = yield SASL_AUTHENTICATE, {"auth_bytes": token}
                answer = self._answer(conn, body)
                lifetime = _lifetime_ms(body)
                token = steps.send(answer)
        except StopIteration:
            pass
        except SaslFailure as exc:
            raise self._failed(conn, str(exc)) from None
        return time.monotonic() + lifetime / 1000 * REAUTH_AT if lifetime > 0 else None

    def authenticate(self, conn) -> float | None:
        """Log in on a blocking connection (after ApiVersions); the monotonic time to
        re-authenticate at (None: the session does not expire)."""
        if not self.sasl:
            return None
        login, body = self._login(conn), None
        while True:
            try:
                api_key, request = login.send(body)
            except StopIteration as done:
                return done.value
            body = conn.request(api_key, request)

    async def authenticate_async(self, conn) -> float | None:
        """authenticate() for an AsyncKafkaConnection."""
        if not self.sasl:
            return None
        login, body = self._login(conn), None
        while True:
            try:
                api_key, request = login.send(body)
            except StopIteration as done:
                return done.value
            body = await conn.request(api_key, request)


def _lifetime_ms(body) -> int:
    """SaslAuthenticate v1+'s session_lifetime_ms (kio gives a timedelta); 0 in v0."""
    value = getattr(body, "session_lifetime", None)
    if value is None:
        return 0
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def inter_broker_security(listener_security, mechanism: str, where: str) -> ClientSecurity | None:
    """What a broker connects to the others with: the inter-broker listener's protocol, its
    stores (its own certificate offered, the peers' verified, their names checked unless
    ssl.endpoint.identification.algorithm is empty) and its login for `mechanism`."""
    listener = listener_security.listener
    if listener.protocol == PLAINTEXT:
        return None
    tls = ClientTls(listener_security.settings, where) if listener.tls else None
    if not listener.sasl:
        return ClientSecurity(listener.protocol, reloading=tls)
    login = listener_security.logins[mechanism]
    return ClientSecurity(listener.protocol, None, mechanism, login.username, login.password, tls)
