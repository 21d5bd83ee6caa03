"""TLS contexts (Python's ssl module) from Kafka's ssl.* settings, for a listener (server side)
and for a client (inter-broker connections, the CLI, the Spark connector).

- ssl.enabled.protocols: TLSv1.2 and/or TLSv1.3; anything older is refused (a client that
  offers only TLS 1.0/1.1 fails its handshake).
- ssl.client.auth (server): none, requested (a certificate is asked for and verified when
  given) or required (a client without a trusted certificate fails its handshake).
- ssl.endpoint.identification.algorithm (client): https (the default: the server's certificate
  must name the host connected to) or empty (not checked; the chain is still verified).
- Stores: key_store.py. A listener's stores are read again when one of their files changes
  (checked at most once a second, as connections arrive): new connections then get the new
  certificate and trust, without a restart; a store that cannot be read keeps the last good
  one (logged).
- Dynamic store settings (listener.name.<l>.ssl.keystore.location, ...): tls_reconfiguration.py.
"""
from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
import time

from logcore.errors import InvalidConfigError
from logcore.security.key_store import KeyMaterial, file_stamp, load_keystore, load_truststore, store_files

logger = logging.getLogger(__name__)

TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_OLD = ("SSLv2", "SSLv3", "TLSv1", "TLSv1.1")
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
RELOAD_CHECK_S = 1.0


def tls_versions(settings: dict[str, str], where: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = [v.strip() for v in (settings.get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if v.strip()]
    old = [n for n in names if n in _OLD]
    if old:
        raise InvalidConfigError(f"{where}: ssl.enabled.protocols={','.join(names)}: {', '.join(old)} is not"
                                 " allowed (insecure); use TLSv1.2 and/or TLSv1.3")
    bad = [n for n in names if n not in TLS_VERSIONS]
    if bad or not names:
        raise InvalidConfigError(f"{where}: ssl.enabled.protocols={','.join(names)}: must list TLSv1.2 and/or"
                                 " TLSv1.3")
    protocol = (settings.get("ssl.protocol") or "TLSv1.3").strip()
    if protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
        raise InvalidConfigError(f"{where}: ssl.protocol={protocol}: must be TLSv1.3, TLSv1.2 or TLS")
    picked = sorted(TLS_VERSIONS[n] for n in names)
    return picked[0], picked[-1]


def client_auth(settings: dict[str, str], where: str) -> ssl.VerifyMode:
    value = (settings.get("ssl.client.auth") or "none").strip().lower()
    if value not in CLIENT_AUTH:
        raise InvalidConfigError(f"{where}: ssl.client.auth={value}: must be none, requested or required")
    return CLIENT_AUTH[value]


def hostname_check(settings: dict[str, str], where: str) -> bool:
    value = settings.get("ssl.endpoint.identification.algorithm")
    value = "https" if value is None else value.strip()
    if value.lower() not in ("https", ""):
        raise InvalidConfigError(f"{where}: ssl.endpoint.identification.algorithm={value}: must be https or empty")
    return value.lower() == "https"


def _load_chain(context: ssl.SSLContext, chain_pem: bytes, key_pem: bytes) -> None:
    """ssl reads a certificate chain from files only: a private folder, removed at once."""
    with tempfile.TemporaryDirectory(prefix="seglog-tls-") as folder:
        os.chmod(folder, 0o700)
        path = os.path.join(folder, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem + chain_pem)
        context.load_cert_chain(path)


def server_context(settings: dict[str, str], where: str) -> ssl.SSLContext:
    """A listener's context: its keystore (required), its truststore and client auth."""
    return _server_context(settings, where)[0]


def _server_context(settings: dict[str, str], where: str) -> tuple[ssl.SSLContext, KeyMaterial]:
    low, high = tls_versions(settings, where)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version, context.maximum_version = low, high
    # A TLS 1.2 client's renegotiation is refused, as by Kafka's listeners (and by OpenSSL 3's
    # default, which an OpenSSL 1.1 build does not have).
    context.options |= ssl.OP_NO_RENEGOTIATION
    # The server's order picks the suite (AES-256-GCM first), whatever the client lists first, as
    # Kafka's JSSE listeners do (Python sets it on every context; said here because it is relied on).
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    material = load_keystore(settings, where)
    if material is None:
        raise InvalidConfigError(f"{where}: a TLS listener needs a keystore: ssl.keystore.location (PKCS12 or"
                                 " PEM), or ssl.keystore.certificate.chain with ssl.keystore.key")
    try:
        _load_chain(context, material.chain_pem, material.key_pem)
    except ssl.SSLError as exc:
        raise InvalidConfigError(f"{where}: the keystore's certificate and key do not go together: {exc}") from None
    mode = client_auth(settings, where)
    if mode != ssl.CERT_NONE:
        context.verify_mode = mode
        _trust(context, settings, where, ssl.Purpose.CLIENT_AUTH)
    return context, material


def client_context(settings: dict[str, str], where: str) -> ssl.SSLContext:
    """A client's context: the server's chain verified against the truststore (or the system's
    authorities), its name checked unless ssl.endpoint.identification.algorithm is empty, and
    the keystore's certificate offered when one is set (client auth)."""
    low, high = tls_versions(settings, where)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version, context.maximum_version = low, high
    context.check_hostname = hostname_check(settings, where)
    context.verify_mode = ssl.CERT_REQUIRED
    _trust(context, settings, where, ssl.Purpose.SERVER_AUTH)
    material = load_keystore(settings, where)
    if material is not None:
        try:
            _load_chain(context, material.chain_pem, material.key_pem)
        except ssl.SSLError as exc:
            raise InvalidConfigError(f"{where}: the keystore's certificate and key do not go together: {exc}") from None
    return context


def _client_for_check(settings: dict[str, str], where: str) -> ssl.SSLContext:
    """A client of this listener's own stores (its truststore, its keystore offered), names not
    checked: the validation handshakes of an inter-broker listener."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    _trust(context, settings, where, ssl.Purpose.SERVER_AUTH)
    material = load_keystore(settings, where)
    _load_chain(context, material.chain_pem, material.key_pem)
    return context


def _trust(context: ssl.SSLContext, settings: dict[str, str], where: str, purpose: ssl.Purpose) -> None:
    """The authorities the context verifies peers against: the truststore's, else the system's."""
    trusted = load_truststore(settings, where)
    if trusted is None:
        context.load_default_certs(purpose)
    else:
        context.load_verify_locations(cadata=trusted.decode())


def handshake_in_memory(client: ssl.SSLContext, server: ssl.SSLContext) -> None:
    """A TLS handshake in memory; ssl.SSLError when either side refuses the other."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_side=False, server_hostname="localhost")
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {c: False, s: False}
    for _ in range(20):
        for side in (c, s):
            if not done[side]:
                try:
                    side.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            # TLS 1.3: the server's verdict on the client's certificate arrives after the handshake
            s.write(b"x")
            c_in.write(s_out.read())
            try:
                c.read(1)
            except ssl.SSLWantReadError:
                pass
            return
    raise ssl.SSLError("the validation handshake did not finish")


def check_peers_agree(old: dict[str, str], new: dict[str, str], where: str) -> None:
    """Kafka's check for an inter-broker listener's new stores: the brokers still on the old
    ones and this one on the new ones must accept each other (new certificate trusted by the old
    truststore, old certificate by the new truststore), so that replication goes on while the
    brokers are updated one at a time."""
    for client, server, what in ((old, new, "the current truststore does not trust the new certificate"),
                                 (new, old, "the new truststore does not trust the current certificate")):
        try:
            handshake_in_memory(_client_for_check(client, where), _server_context(server, where)[0])
        except ssl.SSLError as exc:
            raise InvalidConfigError(f"{where}: this is the inter-broker listener and {what}, so brokers"
                                     f" on either would not connect ({exc.reason or exc}): add the new CA"
                                     " to the truststores first") from None


def _names_truststore(settings: dict[str, str]) -> bool:
    return bool(settings.get("ssl.truststore.location") or settings.get("ssl.truststore.certificates"))


class ServerTls:
    """A listener's TLS: `context` is given to the server once; each handshake is moved (SNI
    callback) to the newest context, rebuilt when a store file changed or when the dynamic
    broker configs give the listener new store settings (checked by `build`, taken by `use`)."""

    def __init__(self, settings: dict[str, str], where: str):
        self._static = dict(settings)
        self._settings = dict(settings)
        self._where = where
        self._files = store_files(settings)
        self._stamp = file_stamp(self._files)
        self._current, self._material = _server_context(settings, where)
        self._checked = time.monotonic()
        self._lock = threading.Lock()
        self.reloads = 0
        self.context = self._current
        self.context.sni_callback = self._pick

    def _pick(self, ssl_object, server_name, _context) -> None:
        self.check_reload()
        current = self._current
        if ssl_object.context is not current:
            ssl_object.context = current
        return None

    def build(self, overrides: dict[str, str], *, inter_broker: bool = False
              ) -> tuple[dict[str, str], ssl.SSLContext, KeyMaterial]:
        """The settings, context and keystore the listener would have with the dynamic store
        settings `overrides` over its static ones; InvalidConfigError when they are not usable
        (tls_reconfiguration's rules; `inter_broker`: check_peers_agree too)."""
        from logcore.security.tls_reconfiguration import check_compatible
        where = self._where_for(overrides)
        if not _names_truststore(self._settings) and _names_truststore({**self._static, **overrides}):
            raise InvalidConfigError(f"{where}: Cannot add SSL truststore to an existing listener for which no"
                                     " truststore was configured.")
        settings, context, material = self._context_for(overrides)
        check_compatible(self._material, material, settings, where)
        if inter_broker:
            check_peers_agree(self._settings, settings, where)
        return settings, context, material

    def _where_for(self, overrides: dict[str, str]) -> str:
        return f"{self._where}: dynamic {', '.join(sorted(overrides)) or 'store settings removed'}"

    def _context_for(self, overrides: dict[str, str]) -> tuple[dict[str, str], ssl.SSLContext, KeyMaterial]:
        settings = {**self._static, **overrides}
        try:
            context, material = _server_context(settings, self._where_for(overrides))
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise InvalidConfigError(f"{self._where_for(overrides)}: the stores cannot be used: {exc}") from None
        return settings, context, material

    def use(self, overrides: dict[str, str]) -> None:
        """Take dynamic store settings checked when they were altered (build), or persisted and
        read at start-up: they must be usable, and are not compared again (several changes, e.g.
        a new CA trusted and then a new certificate, may hold only together). New connections
        use them; open ones keep their context."""
        self._take(overrides, *self._context_for(overrides))

    def _take(self, overrides: dict[str, str], settings: dict[str, str], context: ssl.SSLContext,
              material: KeyMaterial) -> None:
        with self._lock:
            self._settings = settings
            self._files = store_files(settings)
            self._stamp = file_stamp(self._files)
            self._current, self._material = context, material
            self.reloads += 1
        logger.info("%s: new key/trust store settings (%s); new connections use them", self._where,
                    ", ".join(sorted(overrides)) or "back to the static ones")

    def check_reload(self, *, force: bool = False) -> bool:
        """Rebuild the context when a store file changed (at most once per RELOAD_CHECK_S unless
        `force`); whether a new context is in use."""
        now = time.monotonic()
        if not self._files or (not force and now - self._checked < RELOAD_CHECK_S):
            return False
        with self._lock:
            self._checked = now
            stamp = file_stamp(self._files)
            if stamp == self._stamp:
                return False
            try:
                fresh, material = _server_context(self._settings, self._where)
            except (InvalidConfigError, ssl.SSLError, OSError) as exc:
                logger.error("%s: the changed key or trust store cannot be used (%s); the previous one"
                             " stays in use", self._where, exc)
                self._stamp = stamp          # tried once per change, not at every handshake
                return False
            self._stamp = stamp
            self._current, self._material = fresh, material
            self.reloads += 1
            logger.info("%s: key/trust store changed; new connections use it", self._where)
            return True


class ClientTls:
    """The client side of the inter-broker listener (this broker connecting to the others): its
    context follows the listener's dynamic store settings, as Kafka's inter-broker clients do;
    connections made since use the new one."""

    def __init__(self, settings: dict[str, str], where: str):
        self._static = dict(settings)
        self._where = where
        self.context = client_context(settings, where)

    def build(self, overrides: dict[str, str]) -> ssl.SSLContext:
        """The context with `overrides` over the static settings (InvalidConfigError if unusable)."""
        where = f"{self._where}: dynamic {', '.join(sorted(overrides)) or 'store settings removed'} (client side)"
        try:
            return client_context({**self._static, **overrides}, where)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise InvalidConfigError(f"{where}: the stores cannot be used: {exc}") from None

    def use(self, overrides: dict[str, str]) -> None:
        self.context = self.build(overrides)
        logger.info("%s: inter-broker connections made from now on use the new key/trust store settings",
                    self._where)
