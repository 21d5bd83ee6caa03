"""How a broker reaches ZooKeeper over TLS, with Kafka's broker settings (`zookeeper.ssl.*`, Kafka
3.x; ZooKeeper's servers listen with `secureClientPort`):

- zookeeper.ssl.client.enable: TLS on (every other zookeeper.ssl.* setting needs it);
- zookeeper.clientCnxnSocket: ZooKeeper's client socket class; with TLS only Netty's
  (org.apache.zookeeper.ClientCnxnSocketNetty) is accepted, as ZooKeeper's NIO socket has none;
- zookeeper.ssl.keystore.*: the client certificate (servers with ssl.clientAuth=need ask for
  it); zookeeper.ssl.truststore.*: the certificates the servers' chains must lead to (empty:
  the system's authorities). PKCS12 and PEM (a PEM key encrypted with the keystore password);
  JKS is refused; with no type the file name tells it (.p12/.pfx, .pem), as ZooKeeper does;
- zookeeper.ssl.protocol (TLSv1.2, Kafka's default), zookeeper.ssl.enabled.protocols (default:
  the protocol alone), zookeeper.ssl.cipher.suites (IANA names, as Java gives them);
- zookeeper.ssl.endpoint.identification.algorithm: HTTPS (the default) checks that a server's
  certificate names the host of zookeeper.connect; empty: not checked;
- zookeeper.ssl.crl.enable / zookeeper.ssl.ocsp.enable: true is refused (no revocation checks).

Kafka also takes these from the ZooKeeper client's JVM system properties (zookeeper.client.secure,
zookeeper.ssl.keyStore.location, ...); seglog takes those names as broker settings, as it takes
the JAAS file's (zookeeper_login.py), and the zookeeper.ssl.* name wins when both are given
(Kafka's rule). The stores are read into memory (key_store.py) and checked when the broker starts.
"""
from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field

from logcore.errors import InvalidConfigError
from logcore.log.config_key import ConfigKey, ConfigType

ENABLE = "zookeeper.ssl.client.enable"
SOCKET = "zookeeper.clientCnxnSocket"
NETTY_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNetty"
NIO_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNIO"
TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_INSECURE = ("SSLv2", "SSLv3", "SSLv2Hello", "TLSv1", "TLSv1.1")
_EXTENSIONS = {".p12": "PKCS12", ".pfx": "PKCS12", ".pem": "PEM", ".crt": "PEM", ".jks": "JKS"}


def _key(name: str, ctype: ConfigType, default, doc: str) -> ConfigKey:
    return ConfigKey(name, ctype, default, doc, category="security")


KEYS = (
    _key(ENABLE, ConfigType.BOOLEAN, False, "true: the broker connects to ZooKeeper over TLS (the"
         " servers' secureClientPort)."),
    _key(SOCKET, ConfigType.STRING, "", "ZooKeeper's client socket class: " + NETTY_SOCKET + " (needed"
         " with TLS) or " + NIO_SOCKET + "; empty: the one TLS needs."),
    _key("zookeeper.ssl.keystore.location", ConfigType.STRING, "", "The broker's client certificate and key"
         " for ZooKeeper (PKCS12 or PEM)."),
    _key("zookeeper.ssl.keystore.password", ConfigType.STRING, "", "Password of that keystore (of the key"
         " of a PEM one)."),
    _key("zookeeper.ssl.keystore.type", ConfigType.STRING, "", "PKCS12 or PEM; empty: told by the file"
         " name (.p12, .pfx, .pem)."),
    _key("zookeeper.ssl.truststore.location", ConfigType.STRING, "", "The certificates ZooKeeper servers'"
         " chains must lead to; empty: the system's authorities."),
    _key("zookeeper.ssl.truststore.password", ConfigType.STRING, "", "Password of a PKCS12 truststore."),
    _key("zookeeper.ssl.truststore.type", ConfigType.STRING, "", "PKCS12 or PEM; empty: told by the file"
         " name."),
    _key("zookeeper.ssl.protocol", ConfigType.STRING, "TLSv1.2", "TLSv1.2, TLSv1.3 or TLS (both): the"
         " enabled protocol when zookeeper.ssl.enabled.protocols is not set."),
    _key("zookeeper.ssl.enabled.protocols", ConfigType.LIST, "", "TLSv1.2 and/or TLSv1.3; empty: the"
         " protocol of zookeeper.ssl.protocol."),
    _key("zookeeper.ssl.cipher.suites", ConfigType.LIST, "", "Cipher suites (IANA names); empty: the"
         " defaults of the TLS library."),
    _key("zookeeper.ssl.endpoint.identification.algorithm", ConfigType.STRING, "HTTPS", "HTTPS: a server's"
         " certificate must name the host connected to; empty: not checked (the chain still is)."),
    _key("zookeeper.ssl.crl.enable", ConfigType.BOOLEAN, False, "Certificate revocation lists: not"
         " supported (true is refused)."),
    _key("zookeeper.ssl.ocsp.enable", ConfigType.BOOLEAN, False, "OCSP: not supported (true is refused)."),
)

# Kafka's setting -> the ZooKeeper client's JVM system property it falls back to
SYSTEM_PROPERTIES = {
    ENABLE: "zookeeper.client.secure",
    "zookeeper.ssl.keystore.location": "zookeeper.ssl.keyStore.location",
    "zookeeper.ssl.keystore.password": "zookeeper.ssl.keyStore.password",
    "zookeeper.ssl.keystore.type": "zookeeper.ssl.keyStore.type",
    "zookeeper.ssl.truststore.location": "zookeeper.ssl.trustStore.location",
    "zookeeper.ssl.truststore.password": "zookeeper.ssl.trustStore.password",
    "zookeeper.ssl.truststore.type": "zookeeper.ssl.trustStore.type",
    "zookeeper.ssl.enabled.protocols": "zookeeper.ssl.enabledProtocols",
    "zookeeper.ssl.cipher.suites": "zookeeper.ssl.ciphersuites",
    "zookeeper.ssl.endpoint.identification.algorithm": "zookeeper.ssl.hostnameVerification",
    "zookeeper.ssl.crl.enable": "zookeeper.ssl.crl",
    "zookeeper.ssl.ocsp.enable": "zookeeper.ssl.ocsp",
}
_PROPERTY_TYPES = {"zookeeper.ssl.hostnameVerification": ConfigType.BOOLEAN}

def _property_key(name: str, prop: str) -> ConfigKey:
    ctype = _PROPERTY_TYPES.get(prop) or next(k.type for k in KEYS if k.name == name)
    default = False if ctype is ConfigType.BOOLEAN else ""
    return _key(prop, ctype, default, f"The ZooKeeper client's JVM system property for {name}"
                " (which wins when both are given).")


PROPERTY_KEYS = tuple(_property_key(name, prop) for name, prop in SYSTEM_PROPERTIES.items())
NAMES = frozenset(k.name for k in KEYS + PROPERTY_KEYS)
_BY_NAME = {k.name: k for k in KEYS + PROPERTY_KEYS}


def given(props: dict[str, str]) -> list[str]:
    """The ZooKeeper TLS settings among `props` (under either name)."""
    return sorted(n for n in props if n in NAMES)


def _values(props: dict[str, str], where: str) -> tuple[dict, dict[str, str]]:
    """Each setting's value and the name it was given by (the Kafka name wins)."""
    values, origin = {}, {}
    for key in KEYS:
        prop = SYSTEM_PROPERTIES.get(key.name)
        name = key.name if key.name in props else prop if prop in props else None
        try:
            value = _BY_NAME[name].parse(props[name]) if name else key.default
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"{where}: {exc}") from None
        if name == "zookeeper.ssl.hostnameVerification":
            value = "HTTPS" if value else ""
        values[key.name], origin[key.name] = value, name or key.name
    return values, origin


def _store_type(kind: str, location: str, setting: str, where: str) -> str:
    if not kind:
        suffix = location[location.rfind("."):].lower() if "." in location else ""
        kind = _EXTENSIONS.get(suffix, "")
        if not kind:
            raise InvalidConfigError(f"{where}: {setting}={location}: set {setting.replace('location', 'type')}"
                                     " (PKCS12 or PEM): the file name does not tell the store's type")
    kind = kind.strip().upper()
    if kind == "JKS":
        raise InvalidConfigError(
            f"{where}: {setting}={location} is a JKS store, which seglog cannot read: convert it to PKCS12"
            " (keytool -importkeystore -deststoretype PKCS12) or PEM")
    if kind not in ("PKCS12", "PEM"):
        raise InvalidConfigError(f"{where}: {setting.replace('location', 'type')}={kind}: must be PKCS12 or PEM")
    return kind


def _encrypted_pem(path: str) -> bool:
    """Whether a PEM file's key is encrypted (an unreadable file is reported when it is loaded)."""
    try:
        with open(path, "rb") as f:
            return b"ENCRYPTED" in f.read()
    except OSError:
        return False


def _versions(values: dict, origin: dict[str, str], where: str) -> tuple[str, ...]:
    protocol = values["zookeeper.ssl.protocol"].strip()
    if protocol not in ("TLS", *TLS_VERSIONS):
        raise InvalidConfigError(f"{where}: zookeeper.ssl.protocol={protocol}: must be TLSv1.2, TLSv1.3 or TLS"
                                 + (" (older versions are insecure)" if protocol in _INSECURE else ""))
    enabled = tuple(v.strip() for v in values["zookeeper.ssl.enabled.protocols"] if v.strip())
    setting = origin["zookeeper.ssl.enabled.protocols"]
    old = [v for v in enabled if v in _INSECURE]
    if old:
        raise InvalidConfigError(f"{where}: {setting}={','.join(enabled)}: {', '.join(old)} is not allowed"
                                 " (insecure); use TLSv1.2 and/or TLSv1.3")
    bad = [v for v in enabled if v not in TLS_VERSIONS]
    if bad:
        raise InvalidConfigError(f"{where}: {setting}={','.join(enabled)}: {', '.join(bad)} is not a TLS"
                                 " version; use TLSv1.2 and/or TLSv1.3")
    if enabled:
        return enabled
    return tuple(TLS_VERSIONS) if protocol == "TLS" else (protocol,)


_KX = {"ECDHE_ECDSA": "ECDHE-ECDSA-", "ECDHE_RSA": "ECDHE-RSA-", "DHE_RSA": "DHE-RSA-", "DHE_DSS": "DHE-DSS-",
       "RSA": ""}
_ENC = {"AES_128_GCM": "AES128-GCM", "AES_256_GCM": "AES256-GCM", "AES_128_CBC": "AES128", "AES_256_CBC": "AES256",
        "CHACHA20_POLY1305": "CHACHA20-POLY1305", "AES_128_CCM": "AES128-CCM", "AES_256_CCM": "AES256-CCM",
        "AES_128_CCM_8": "AES128-CCM8", "AES_256_CCM_8": "AES256-CCM8"}
_TLS12_SUITE = re.compile(r"TLS_(%s)_WITH_(%s)(?:_(SHA|SHA256|SHA384))?" % ("|".join(_KX), "|".join(_ENC)))


def _openssl_name(suite: str) -> str | None:
    """OpenSSL's name of a TLS 1.2 suite given by its IANA name (Java's), or None."""
    m = _TLS12_SUITE.fullmatch(suite)
    if m is None:
        return None
    kx, enc, mac = m.groups()
    if enc.startswith("CHACHA20") or "CCM" in enc:       # AEAD: OpenSSL's name has no MAC
        return _KX[kx] + _ENC[enc] if mac in (None, "SHA256") else None
    return f"{_KX[kx]}{_ENC[enc]}-{mac}" if mac else None


def _ciphers(context: ssl.SSLContext, suites: tuple[str, ...], versions: tuple[str, ...], setting: str,
             where: str) -> None:
    """Limit `context` to `suites`. OpenSSL's TLS 1.3 suites cannot be chosen from Python: with
    TLSv1.3 enabled the list must name all of them, so that what is negotiated is what it says."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls13 = [c["name"] for c in probe.get_ciphers() if c["protocol"] == "TLSv1.3"]
    probe.set_ciphers("ALL")
    known12 = {c["name"] for c in probe.get_ciphers() if c["protocol"] != "TLSv1.3"}
    listed13 = [s for s in suites if s in tls13]
    mapped = []
    for s in suites:
        if s in tls13:
            continue
        name = _openssl_name(s)
        if name is None or name not in known12:
            raise InvalidConfigError(f"{where}: {setting}: {s} is not a cipher suite seglog's TLS library"
                                     " offers (give IANA names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,"
                                     " TLS_AES_128_GCM_SHA256)")
        mapped.append(name)
    if "TLSv1.3" in versions and listed13 and sorted(listed13) != sorted(tls13):
        raise InvalidConfigError(
            f"{where}: {setting} names only some TLS 1.3 suites ({', '.join(listed13)}): seglog cannot limit"
            f" TLS 1.3's suites; list all of {', '.join(tls13)}, or none of them with"
            " zookeeper.ssl.enabled.protocols=TLSv1.2")
    if "TLSv1.3" in versions and not listed13:
        raise InvalidConfigError(
            f"{where}: {setting} names no TLS 1.3 suite while TLSv1.3 is enabled: seglog cannot turn TLS 1.3's"
            f" suites off; list {', '.join(tls13)} too, or set zookeeper.ssl.enabled.protocols=TLSv1.2")
    if "TLSv1.2" in versions and not mapped:
        raise InvalidConfigError(f"{where}: {setting} names no TLS 1.2 suite while TLSv1.2 is enabled: list"
                                 " some, or set zookeeper.ssl.enabled.protocols=TLSv1.3")
    if mapped:
        context.set_ciphers(":".join(mapped))


_GENERIC = {"ssl.keystore.location": "zookeeper.ssl.keystore.location",
            "ssl.keystore.password": "zookeeper.ssl.keystore.password",
            "ssl.key.password": "zookeeper.ssl.keystore.password",
            "ssl.keystore.type": "zookeeper.ssl.keystore.type",
            "ssl.truststore.location": "zookeeper.ssl.truststore.location",
            "ssl.truststore.password": "zookeeper.ssl.truststore.password",
            "ssl.truststore.type": "zookeeper.ssl.truststore.type"}
_GENERIC_NAME = re.compile(r"(?<![\w.])(%s)(?![\w])" % "|".join(re.escape(n) for n in _GENERIC))


def _zookeeper_names(message: str, origin: dict[str, str]) -> str:
    """key_store's messages name the listener settings: name the ZooKeeper ones instead."""
    return _GENERIC_NAME.sub(lambda m: origin[_GENERIC[m.group(1)]], message)


@dataclass(frozen=True)
class ZooKeeperTls:
    """The broker's TLS to ZooKeeper: a client context per connection attempt's session
    (`context()`), and what a failed handshake means in terms of the settings (`explain`)."""
    settings: dict[str, str] = field(repr=False)    # generic ssl.* names -> values, for key_store
    origin: dict[str, str]                          # Kafka's setting -> the name it was given by
    versions: tuple[str, ...]
    cipher_suites: tuple[str, ...]
    check_hostname: bool

    @classmethod
    def from_props(cls, props: dict[str, str], *, cluster: bool, where: str) -> "ZooKeeperTls | None":
        """The settings among `props`, checked, or None when TLS is off; InvalidConfigError
        naming the setting otherwise."""
        names = given(props)
        if names and not cluster:
            raise InvalidConfigError(f"{where}: {names[0]} is about the broker's ZooKeeper session: it needs"
                                     " zookeeper.connect")
        values, origin = _values(props, where)
        socket_class = values[SOCKET].strip()
        if socket_class not in ("", NETTY_SOCKET, NIO_SOCKET):
            raise InvalidConfigError(f"{where}: {SOCKET}={socket_class}: must be {NETTY_SOCKET} (needed with"
                                     f" TLS) or {NIO_SOCKET}")
        if not values[ENABLE]:
            extra = [n for n in names if n not in (ENABLE, SYSTEM_PROPERTIES[ENABLE], SOCKET)]
            if extra:
                raise InvalidConfigError(f"{where}: {extra[0]} is set but TLS to ZooKeeper is off: set"
                                         f" {ENABLE}=true, or remove it")
            return None
        if socket_class == NIO_SOCKET:
            raise InvalidConfigError(f"{where}: {SOCKET}={NIO_SOCKET} cannot do TLS ({origin[ENABLE]}=true):"
                                     f" use {NETTY_SOCKET}, as Kafka's brokers do")
        for name in ("zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable"):
            if values[name]:
                raise InvalidConfigError(f"{where}: {origin[name]}=true: certificate revocation checks are not"
                                         " supported by seglog; remove it (or set false)")
        algorithm = values["zookeeper.ssl.endpoint.identification.algorithm"].strip()
        if algorithm.upper() not in ("HTTPS", ""):
            raise InvalidConfigError(f"{where}: zookeeper.ssl.endpoint.identification.algorithm={algorithm}:"
                                     " must be HTTPS (check the server's host name) or empty (do not)")
        versions = _versions(values, origin, where)
        settings: dict[str, str] = {}
        for side in ("keystore", "truststore"):
            location = values[f"zookeeper.ssl.{side}.location"]
            if not location:
                extra = [origin[f"zookeeper.ssl.{side}.{n}"] for n in ("password", "type")
                         if values[f"zookeeper.ssl.{side}.{n}"]]
                if extra:
                    raise InvalidConfigError(f"{where}: {extra[0]} is set without"
                                             f" zookeeper.ssl.{side}.location")
                continue
            kind = _store_type(values[f"zookeeper.ssl.{side}.type"], location,
                               origin[f"zookeeper.ssl.{side}.location"], where)
            settings[f"ssl.{side}.location"] = location
            settings[f"ssl.{side}.type"] = kind
            password = values[f"zookeeper.ssl.{side}.password"]
            if password:
                settings[f"ssl.{side}.password"] = password
                if side == "keystore" and kind == "PEM" and _encrypted_pem(location):
                    settings["ssl.key.password"] = password      # ZooKeeper opens a PEM key with it
        tls = cls(settings, origin, versions, tuple(s.strip() for s in values["zookeeper.ssl.cipher.suites"]
                                                    if s.strip()), algorithm.upper() == "HTTPS")
        tls.context(where)       # the stores are read and checked now: a broker with bad ones does not start
        return tls

    def context(self, where: str = "ZooKeeper TLS") -> ssl.SSLContext:
        """A client context from the settings (the stores read again)."""
        from logcore.security.key_store import load_keystore, load_truststore
        from logcore.security.tls_context import _load_chain as load_chain
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        picked = sorted(TLS_VERSIONS[v] for v in self.versions)
        context.minimum_version, context.maximum_version = picked[0], picked[-1]
        context.check_hostname = self.check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        if self.cipher_suites:
            _ciphers(context, self.cipher_suites, self.versions, self.origin["zookeeper.ssl.cipher.suites"], where)
        try:
            trusted = load_truststore(self.settings, where)
            material = load_keystore(self.settings, where)
        except InvalidConfigError as exc:
            raise InvalidConfigError(_zookeeper_names(str(exc), self.origin)) from None
        if trusted is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            context.load_verify_locations(cadata=trusted.decode())
        if material is not None:
            try:
                load_chain(context, material.chain_pem, material.key_pem)
            except ssl.SSLError as exc:
                raise InvalidConfigError(f"{where}: {self.origin['zookeeper.ssl.keystore.location']}: its"
                                         f" certificate and key do not go together: {exc}") from None
        return context

    @property
    def has_keystore(self) -> bool:
        return "ssl.keystore.location" in self.settings

    def explain(self, exc: BaseException, server: str) -> str:
        """What a TLS failure talking to `server` says about the settings."""
        reason = getattr(exc, "reason", None) or ""
        detail = getattr(exc, "verify_message", None) or reason or str(exc)
        trust = self.origin["zookeeper.ssl.truststore.location"]
        keystore = self.origin["zookeeper.ssl.keystore.location"]
        if isinstance(exc, ssl.SSLCertVerificationError) or reason == "CERTIFICATE_VERIFY_FAILED":
            if "hostname" in str(exc).lower() or "IP address mismatch" in str(exc):
                return (f"the certificate of ZooKeeper at {server} does not name that host ({detail}):"
                        " zookeeper.ssl.endpoint.identification.algorithm=HTTPS checks it; connect by a name it"
                        " holds, or set it empty")
            where = f"{trust}={self.settings['ssl.truststore.location']}" if "ssl.truststore.location" in \
                self.settings else f"the system's authorities ({trust} is not set)"
            return f"the certificate of ZooKeeper at {server} is not trusted by {where}: {detail}"
        if reason == "WRONG_VERSION_NUMBER" or "wrong version number" in str(exc):
            return (f"ZooKeeper at {server} does not speak TLS there ({ENABLE}=true): connect to its"
                    " secureClientPort")
        if reason in ("NO_PROTOCOLS_AVAILABLE", "UNSUPPORTED_PROTOCOL", "TLSV1_ALERT_PROTOCOL_VERSION"):
            return (f"ZooKeeper at {server} and this broker agree on no TLS version"
                    f" ({self.origin['zookeeper.ssl.enabled.protocols']}={','.join(self.versions)}): {reason}")
        if reason in ("NO_SHARED_CIPHER", "SSLV3_ALERT_HANDSHAKE_FAILURE") and self.has_keystore:
            return (f"ZooKeeper at {server} and this broker agree on no cipher suite"
                    + (f" (zookeeper.ssl.cipher.suites={','.join(self.cipher_suites)})" if self.cipher_suites
                       else "") + f", or it refused this broker's certificate ({keystore}): {reason or exc}")
        if reason.startswith(("SSLV3_ALERT", "TLSV1_ALERT", "TLSV13_ALERT")):
            if not self.has_keystore:
                return (f"ZooKeeper at {server} refused the TLS connection ({reason}): it asks for a client"
                        f" certificate (ssl.clientAuth=need) and {keystore} is not set")
            return (f"ZooKeeper at {server} refused this broker's client certificate ({keystore}="
                    f"{self.settings['ssl.keystore.location']}): {reason}; its truststore must hold the CA"
                    " that issued it")
        return f"TLS with ZooKeeper at {server} failed: {exc}"
