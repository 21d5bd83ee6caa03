"""A TLS listener's key and trust stores changed at runtime through a dynamic broker config, as
Kafka does it (DynamicBrokerConfig with SslFactory's reconfiguration rules):

- the settings: `listener.name.<listener>.<setting>` for the stores' settings only
  (RECONFIGURABLE, Kafka's SslConfigs.RECONFIGURABLE_CONFIGS), per broker: without the listener
  prefix Kafka refuses them ("only per-listener"), and at the cluster default too ("broker id
  must be specified");
- validated before anything is stored or applied: the new stores are read and a context built
  (an unreadable file, a wrong password, a key that does not go with its certificate are
  refused); the new certificate must name the same subject and subject alternative names as the
  one in use unless `ssl.allow.dn.changes` / `ssl.allow.san.changes` (Kafka's rule); a keystore
  cannot be removed and a truststore cannot be added where none was (Kafka's rules); on the
  inter-broker listener the new certificate must be trusted by the old truststore and the old
  certificate by the new one (Kafka's SslEngineValidator: brokers updated one at a time still
  connect to each other); and, which
  Kafka leaves to the handshake, a certificate that is expired or not yet valid is refused;
- applied: new connections get the new context, open ones keep theirs (tls_context.ServerTls).
"""
from __future__ import annotations

import datetime
import logging

from logcore.errors import InvalidConfigError
from logcore.security.key_store import KeyMaterial, STORE_TYPES
from logcore.security.security_config import LISTENER_PREFIX, SECURITY_KEYS

logger = logging.getLogger(__name__)

RECONFIGURABLE = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates"})
SENSITIVE = frozenset({"ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "ssl.keystore.key"})


class PerBrokerOnlyError(InvalidConfigError):
    """A store setting given for the cluster default: Kafka wants a broker id."""


def listener_setting(name: str) -> tuple[str, str] | None:
    """(listener name, upper case; setting) of `listener.name.<l>.<setting>` for a store setting,
    else None."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, setting = name[len(LISTENER_PREFIX):].partition(".")
    if not listener or setting not in RECONFIGURABLE:
        return None
    return listener.upper(), setting


def is_static_listener_setting(name: str) -> bool:
    """A listener's own setting that does not change at runtime (ssl.client.auth, sasl.*, ...)."""
    if not name.startswith(LISTENER_PREFIX):
        return False
    setting = name[len(LISTENER_PREFIX):].partition(".")[2]
    return setting in SECURITY_KEYS and setting not in RECONFIGURABLE


def is_unprefixed(name: str) -> bool:
    return name in RECONFIGURABLE


def check_value(name: str, value: str | None) -> str | None:
    """A store setting's value as given (None: a removal); InvalidConfigError when it cannot be
    one (the files are read later, by the listener that would use them)."""
    if is_unprefixed(name):
        raise InvalidConfigError(f"These security configs can be dynamically updated only per-listener: {name}"
                                 f" (give listener.name.<listener>.{name})")
    _, setting = listener_setting(name)
    if value is None:
        return None
    if setting.endswith(".type") and value.strip().upper() not in STORE_TYPES:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: must be PEM or PKCS12")
    return value


def tls_layer(layer: dict[str, str]) -> dict[str, dict[str, str]]:
    """{listener: {setting: value}} of the store settings in a dynamic layer."""
    out: dict[str, dict[str, str]] = {}
    for name, value in layer.items():
        found = listener_setting(name)
        if found is not None:
            out.setdefault(found[0], {})[found[1]] = value
    return out


def _allowed(settings: dict[str, str], name: str) -> bool:
    return bool(SECURITY_KEYS[name].parse(settings.get(name) or "false"))


def _names(pem: bytes):
    from cryptography import x509
    leaf = x509.load_pem_x509_certificates(pem)[0]
    try:
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = sorted(str(n.value) for n in san)
    except x509.ExtensionNotFound:
        sans = []
    return leaf, sans


def check_compatible(old: KeyMaterial, new: KeyMaterial, settings: dict[str, str], where: str) -> None:
    """Kafka's rules for a keystore replacing `old` (same subject and alternative names unless
    allowed), and a certificate valid now."""
    old_leaf, old_sans = _names(old.chain_pem)
    new_leaf, new_sans = _names(new.chain_pem)
    now = datetime.datetime.now(datetime.timezone.utc)
    if new_leaf.not_valid_after_utc < now:
        raise InvalidConfigError(f"{where}: the new keystore's certificate ({new_leaf.subject.rfc4514_string()})"
                                 f" expired on {new_leaf.not_valid_after_utc.isoformat()}")
    if new_leaf.not_valid_before_utc > now:
        raise InvalidConfigError(f"{where}: the new keystore's certificate ({new_leaf.subject.rfc4514_string()})"
                                 f" is not valid before {new_leaf.not_valid_before_utc.isoformat()}")
    if not _allowed(settings, "ssl.allow.dn.changes") and old_leaf.subject != new_leaf.subject:
        raise InvalidConfigError(f"{where}: Keystore DistinguishedName does not match: existing="
                                 f"{old_leaf.subject.rfc4514_string()}, new={new_leaf.subject.rfc4514_string()}"
                                 " (set ssl.allow.dn.changes=true to allow it)")
    if not _allowed(settings, "ssl.allow.san.changes") and old_sans != new_sans:
        raise InvalidConfigError(f"{where}: Keystore SubjectAltNames do not match: existing={old_sans},"
                                 f" new={new_sans} (set ssl.allow.san.changes=true to allow it)")


class ListenerTlsUpdates:
    """The broker's TLS listeners ({name: ServerTls}) taking the store settings of its own
    dynamic layer."""

    def __init__(self, listeners: dict, inter_broker: str | None = None, client=None):
        """`inter_broker`: the inter-broker listener's name (its new stores must be accepted by
        brokers on its old ones: tls_context.check_peers_agree); `client`: its client side
        (tls_context.ClientTls, None when it is not TLS), which takes them too."""
        self._listeners = listeners
        self._inter_broker = inter_broker
        self._client = client
        self._applied: dict[str, dict[str, str]] = {}

    def check(self, layer: dict[str, str]) -> None:
        """InvalidConfigError when the layer's store settings cannot be applied (nothing changes)."""
        for name, overrides in tls_layer(layer).items():
            tls = self._listeners.get(name)
            if tls is None:
                raise InvalidConfigError(
                    f"listener.name.{name.lower()}.*: {name} is not a TLS listener of this broker"
                    f" ({', '.join(sorted(self._listeners)) or 'it has none'})")
            if overrides != self._applied.get(name, {}):
                tls.build(overrides, inter_broker=name == self._inter_broker)
                if name == self._inter_broker and self._client is not None:
                    self._client.build(overrides)

    def apply(self, layer: dict[str, str]) -> None:
        """Each listener whose store settings changed takes them (checked by `check` before they
        were stored; at start-up, as persisted); one that cannot keeps what it has (logged: a
        layer written by another tool, or a store gone since)."""
        wanted = tls_layer(layer)
        for name, tls in self._listeners.items():
            overrides = wanted.get(name, {})
            if overrides == self._applied.get(name, {}):
                continue
            try:
                tls.use(overrides)
                if name == self._inter_broker and self._client is not None:
                    self._client.use(overrides)
            except InvalidConfigError as exc:
                logger.error("%s", exc)
                continue
            self._applied[name] = overrides
        for name in wanted:
            if name not in self._listeners:
                logger.error("dynamic config listener.name.%s.*: %s is not a TLS listener of this broker;"
                             " ignored", name.lower(), name)
