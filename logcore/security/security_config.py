"""The broker's security settings (Kafka's names): the listeners' protocols, TLS stores, SASL
mechanisms and logins, re-authentication, and the inter-broker listener.

Every ssl.*, sasl.enabled.mechanisms, sasl.jaas.config and connections.max.reauth.ms setting may
be given for one listener, `listener.name.<listener, lower case>.<setting>`, which wins over the
unprefixed one; a SASL login may also be given per mechanism,
`listener.name.<listener>.<mechanism, lower case>.sasl.jaas.config` (Kafka's broker form), and so
may a session's lifetime, `listener.name.<listener>.<mechanism>.connections.max.reauth.ms`.
OAUTHBEARER's settings (access_token.py: sasl.oauthbearer.*, and the validator's
sasl.server.callback.handler.class) likewise: `listener.name.<listener>.oauthbearer.<setting>`
wins over the unprefixed sasl.oauthbearer.* one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from logcore.errors import InvalidConfigError
from logcore.log.config_key import ConfigKey, ConfigType, at_least, unknown_message
from logcore.security.access_token import CALLBACK_HANDLER, OAUTHBEARER_KEYS, OAUTHBEARER_NAMES, OAuthBearerSettings
from logcore.security.jaas import MODULES, PLAIN_MODULE, JaasConfig, parse_jaas
from logcore.security.listener import (DEFAULT_PROTOCOL_MAP, PLAINTEXT, PROTOCOLS, Listener, parse_listeners,
                                       protocol_map)
from logcore.security.session_lifetime import SessionLifetimes
from logcore.security.zookeeper_login import DEFAULT_SECTION, LOGIN_FILE_SETTING, SECTION_SETTING, ZooKeeperLogin
from logcore.security.zookeeper_tls import KEYS as ZOOKEEPER_TLS_KEYS, PROPERTY_KEYS as ZOOKEEPER_TLS_PROPERTIES
from logcore.security.zookeeper_tls import ZooKeeperTls

# What a listener serves, and what seglog itself logs in with (its tools, connector and brokers:
# none of them fetches OAuth tokens).
SERVED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SUPPORTED_MECHANISMS = LOGIN_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
REFUSED_MECHANISMS = {
    "GSSAPI": "Kerberos is not supported by seglog",
    "OAUTHBEARER": "OAUTHBEARER is not supported by seglog's own clients (its tools, the connector, a broker's"
                   " inter-broker login): they do not fetch OAuth tokens (a broker listener serves OAUTHBEARER)",
}
LISTENER_PREFIX = "listener.name."

# Settings that may carry a listener prefix.
_PER_LISTENER = (
    ConfigKey("ssl.keystore.type", ConfigType.STRING, "", "PKCS12 or PEM (JKS: convert it). Default: PEM"
              " when the chain is given inline, else PKCS12.", category="security"),
    ConfigKey("ssl.keystore.location", ConfigType.STRING, "", "The keystore file (this side's certificate"
              " and key); read again when it changes.", category="security"),
    ConfigKey("ssl.keystore.password", ConfigType.STRING, "", "Password of a PKCS12 keystore.", category="security"),
    ConfigKey("ssl.key.password", ConfigType.STRING, "", "Password of the private key (an encrypted PEM key).",
              category="security"),
    ConfigKey("ssl.keystore.certificate.chain", ConfigType.STRING, "", "The certificate chain in PEM, inline"
              " (with ssl.keystore.key and ssl.keystore.type=PEM).", category="security"),
    ConfigKey("ssl.keystore.key", ConfigType.STRING, "", "The private key in PEM, inline.", category="security"),
    ConfigKey("ssl.truststore.type", ConfigType.STRING, "", "PKCS12 or PEM.", category="security"),
    ConfigKey("ssl.truststore.location", ConfigType.STRING, "", "The truststore file (the certificates peers'"
              " chains must lead to); empty: the system's authorities.", category="security"),
    ConfigKey("ssl.truststore.password", ConfigType.STRING, "", "Password of a PKCS12 truststore.",
              category="security"),
    ConfigKey("ssl.truststore.certificates", ConfigType.STRING, "", "Trusted certificates in PEM, inline.",
              category="security"),
    ConfigKey("ssl.allow.dn.changes", ConfigType.BOOLEAN, False, "Whether a dynamic keystore update may change"
              " the certificate's subject (distinguished name).", category="security"),
    ConfigKey("ssl.allow.san.changes", ConfigType.BOOLEAN, False, "Whether a dynamic keystore update may change"
              " the certificate's subject alternative names.", category="security"),
    ConfigKey("ssl.client.auth", ConfigType.STRING, "none", "none, requested or required: whether TLS clients"
              " must present a trusted certificate (its subject is then their principal).", category="security"),
    ConfigKey("ssl.enabled.protocols", ConfigType.LIST, "TLSv1.2,TLSv1.3", "TLSv1.2 and/or TLSv1.3 (older"
              " versions are refused).", category="security"),
    ConfigKey("ssl.protocol", ConfigType.STRING, "TLSv1.3", "TLSv1.3, TLSv1.2 or TLS (the enabled protocols"
              " decide what is negotiated).", category="security"),
    ConfigKey("ssl.endpoint.identification.algorithm", ConfigType.STRING, "https", "https: an inter-broker"
              " connection checks that the other broker's certificate names its host; empty: not checked.",
              category="security"),
    ConfigKey("sasl.enabled.mechanisms", ConfigType.LIST, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
              "SASL mechanisms a SASL listener accepts: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"
              " (Kafka's default, GSSAPI, is not supported).", category="security"),
    ConfigKey("sasl.jaas.config", ConfigType.STRING, "", "The login configuration (PlainLoginModule's"
              ' user_<name>="<password>" are the PLAIN users; username/password: this broker\'s own'
              " inter-broker login).", category="security"),
    ConfigKey("connections.max.reauth.ms", ConfigType.LONG, 0, "KIP-368: an authenticated SASL connection"
              " must re-authenticate within this time or is closed at its next request; 0: never.",
              validator=at_least(0), category="security"),
)
_GLOBAL = (
    ConfigKey("listener.security.protocol.map", ConfigType.LIST, DEFAULT_PROTOCOL_MAP,
              "NAME:PROTOCOL pairs: each listener name's security protocol.", category="security"),
    ConfigKey("inter.broker.listener.name", ConfigType.STRING, "", "The listener other brokers reach this one"
              " on (replica fetches, the controller, transaction markers); empty: the listener named"
              " security.inter.broker.protocol.", category="security"),
    ConfigKey("security.inter.broker.protocol", ConfigType.STRING, PLAINTEXT, "The inter-broker listener's name"
              " when inter.broker.listener.name is not set.", category="security"),
    ConfigKey("sasl.mechanism.inter.broker.protocol", ConfigType.STRING, "PLAIN", "The SASL mechanism brokers"
              " log in to each other with (Kafka's default, GSSAPI, is not supported).", category="security"),
    ConfigKey(LOGIN_FILE_SETTING, ConfigType.STRING, "", "A JAAS file whose Client section is the SASL"
              " DIGEST-MD5 login this broker gives ZooKeeper (Kafka's JVM property of that name);"
              " empty: no ZooKeeper login.", category="security"),
    ConfigKey(SECTION_SETTING, ConfigType.STRING, DEFAULT_SECTION, "The section of that JAAS file holding the"
              " ZooKeeper login.", category="security"),
    ConfigKey("zookeeper.set.acl", ConfigType.BOOLEAN, False, "true: every znode this broker creates is"
              " writable only by the brokers' ZooKeeper login and readable by all (not /config/users,"
              " /config/brokers: only by the brokers); needs the ZooKeeper login.", category="security"),
)
SECURITY_KEYS: dict[str, ConfigKey] = {k.name: k for k in _PER_LISTENER + _GLOBAL + OAUTHBEARER_KEYS
                                       + ZOOKEEPER_TLS_KEYS + ZOOKEEPER_TLS_PROPERTIES}
_PER_LISTENER_NAMES = frozenset(k.name for k in _PER_LISTENER)
REAUTH = "connections.max.reauth.ms"
# Settings that may also be given for one mechanism of a listener (Kafka's ListenerMechanismConfigs
# that seglog serves).
_PER_MECHANISM = ("sasl.jaas.config", REAUTH)


def is_security_name(name: str) -> bool:
    return name in SECURITY_KEYS or name.startswith(LISTENER_PREFIX)


def check_mechanism(mechanism: str, where: str, accepted: tuple[str, ...] = LOGIN_MECHANISMS) -> str:
    """`mechanism` upper-cased when it is one of `accepted` (LOGIN_MECHANISMS for a login,
    SERVED_MECHANISMS for a listener), else InvalidConfigError saying why."""
    m = mechanism.strip().upper()
    if m in REFUSED_MECHANISMS and m not in accepted:
        raise InvalidConfigError(f"{where}: SASL mechanism {m}: {REFUSED_MECHANISMS[m]}; use one of"
                                 f" {', '.join(accepted)}")
    if m not in accepted:
        raise InvalidConfigError(f"{where}: unknown SASL mechanism {mechanism!r}; use one of"
                                 f" {', '.join(accepted)}")
    return m


@dataclass(frozen=True)
class ListenerSecurity:
    """One listener's resolved settings."""
    listener: Listener
    settings: dict[str, str]                       # the ssl.* and sasl.* values that apply to it
    mechanisms: tuple[str, ...]
    logins: dict[str, JaasConfig] = field(default_factory=dict)   # mechanism -> its login config
    reauth_ms: SessionLifetimes = SessionLifetimes()   # connections.max.reauth.ms per mechanism
    oauthbearer: OAuthBearerSettings | None = None  # its token checks, when it serves OAUTHBEARER

    def plain_users(self) -> dict[str, str]:
        login = self.logins.get("PLAIN")
        return login.plain_users() if login is not None and login.module == PLAIN_MODULE else {}


@dataclass(frozen=True)
class SecurityConfig:
    listeners: tuple[Listener, ...]
    advertised: tuple[Listener, ...]               # by name; a port 0 / empty host: the bound one
    inter_broker: str                              # the inter-broker listener's name
    inter_broker_mechanism: str
    by_listener: dict[str, ListenerSecurity]
    zookeeper_login: ZooKeeperLogin | None = None    # SASL to ZooKeeper (a cluster member)
    zookeeper_set_acl: bool = False                  # Kafka's zookeeper.set.acl
    zookeeper_tls: ZooKeeperTls | None = None        # TLS to ZooKeeper (zookeeper.ssl.*)
    given: dict[str, str] = field(default_factory=dict)   # the security settings as given (DescribeConfigs)

    @classmethod
    def from_props(cls, props: dict[str, str], listeners: tuple[str, ...], advertised: tuple[str, ...], *,
                   cluster: bool, where: str) -> "SecurityConfig":
        values = {}
        for name, key in SECURITY_KEYS.items():
            try:
                values[name] = key.parse(props[name]) if name in props else key.default
            except InvalidConfigError as exc:
                raise InvalidConfigError(f"{where}: {exc}") from None
        protocols = protocol_map(values["listener.security.protocol.map"], where)
        bound = parse_listeners(listeners, protocols, "listeners", where)
        if not bound:
            raise InvalidConfigError(f"{where}: listeners is empty: give at least one NAME://host:port")
        adv = parse_listeners(advertised, protocols, "advertised.listeners", where)
        names = [l.name for l in bound]
        for a in adv:
            if a.name not in names:
                raise InvalidConfigError(f"{where}: advertised.listeners names {a.name}, which is not one of the"
                                         f" listeners ({', '.join(names)})")
        by_name = {a.name: a for a in adv}
        advertised_all = tuple(by_name.get(l.name, Listener(l.name, l.protocol, l.host, 0)) for l in bound)
        overrides = _listener_overrides(props, names, where)
        inter = values["inter.broker.listener.name"].strip().upper()
        if inter and "security.inter.broker.protocol" in props:
            raise InvalidConfigError(f"{where}: give inter.broker.listener.name or security.inter.broker.protocol,"
                                     " not both")
        if not inter:
            inter = values["security.inter.broker.protocol"].strip().upper()
            if inter not in PROTOCOLS:
                raise InvalidConfigError(f"{where}: security.inter.broker.protocol={inter}: must be one of"
                                         f" {', '.join(PROTOCOLS)}")
            if inter not in names and not cluster and "security.inter.broker.protocol" not in props:
                inter = names[0]        # a single broker has no inter-broker traffic: any listener
        if inter not in names:
            raise InvalidConfigError(f"{where}: the inter-broker listener {inter} is not one of the listeners"
                                     f" ({', '.join(names)}): set inter.broker.listener.name")
        by_listener = {l.name: _resolve(l, values, props, overrides.get(l.name, {}), where) for l in bound}
        mechanism = check_mechanism(values["sasl.mechanism.inter.broker.protocol"],
                                    f"{where}: sasl.mechanism.inter.broker.protocol")
        inter_sec = by_listener[inter]
        if cluster and inter_sec.listener.sasl:
            if mechanism not in inter_sec.mechanisms:
                raise InvalidConfigError(f"{where}: sasl.mechanism.inter.broker.protocol={mechanism} is not in the"
                                         f" inter-broker listener {inter}'s sasl.enabled.mechanisms")
            login = inter_sec.logins.get(mechanism)
            if login is None or not login.username or login.password is None:
                raise InvalidConfigError(
                    f"{where}: the inter-broker listener {inter} uses SASL {mechanism}: its sasl.jaas.config"
                    f" (listener.name.{inter.lower()}.{mechanism.lower()}.sasl.jaas.config) needs this broker's"
                    ' username="..." password="..."')
        oauth_given = sorted(n for n in props if n in OAUTHBEARER_NAMES)
        if oauth_given and not any(sec.oauthbearer for sec in by_listener.values()):
            raise InvalidConfigError(f"{where}: {oauth_given[0]} is set but no listener enables OAUTHBEARER"
                                     " (sasl.enabled.mechanisms)")
        zk_tls = ZooKeeperTls.from_props(props, cluster=cluster, where=where)
        zk_login, set_acl = _zookeeper_security(values, props, cluster, where,
                                                certificate=zk_tls is not None and zk_tls.has_keystore)
        given = {k: v for k, v in props.items() if is_security_name(k)}
        return cls(tuple(bound), advertised_all, inter, mechanism, by_listener, zk_login, set_acl, zk_tls, given)

    def listener(self, name: str) -> ListenerSecurity:
        return self.by_listener[name]


def _zookeeper_security(values: dict, props: dict[str, str], cluster: bool, where: str, *,
                        certificate: bool) -> tuple[ZooKeeperLogin | None, bool]:
    """The SASL login and zookeeper.set.acl; `certificate`: the broker gives ZooKeeper a TLS client
    certificate, whose subject is then its identity (x509:<DN>) when there is no login."""
    for name in (LOGIN_FILE_SETTING, SECTION_SETTING, "zookeeper.set.acl"):
        if name in props and not cluster:
            raise InvalidConfigError(f"{where}: {name} is about the broker's ZooKeeper session: it needs"
                                     " zookeeper.connect")
    login = None
    if values[LOGIN_FILE_SETTING]:
        login = ZooKeeperLogin.from_file(values[LOGIN_FILE_SETTING], values[SECTION_SETTING].strip(), where)
    elif SECTION_SETTING in props:
        raise InvalidConfigError(f"{where}: {SECTION_SETTING} names a section of the JAAS file given by"
                                 f" {LOGIN_FILE_SETTING}, which is not set")
    if values["zookeeper.set.acl"] and login is None and not certificate:
        # Kafka refuses this too: ACLs naming no identity would lock the brokers out
        raise InvalidConfigError(f"{where}: zookeeper.set.acl=true needs the brokers' ZooKeeper login:"
                                 f" set {LOGIN_FILE_SETTING} to a JAAS file with a {DEFAULT_SECTION} section"
                                 " (DigestLoginModule username/password), or give ZooKeeper a TLS client"
                                 " certificate (zookeeper.ssl.keystore.location)")
    return login, values["zookeeper.set.acl"]


def _listener_overrides(props: dict[str, str], names: list[str], where: str) -> dict[str, dict[str, str]]:
    """listener.name.<l>.<setting> as {LISTENER: {setting: value}} (mechanism logins keep their
    `<mechanism>.sasl.jaas.config` name)."""
    out: dict[str, dict[str, str]] = {}
    lower = {n.lower(): n for n in names}
    for name, value in props.items():
        if not name.startswith(LISTENER_PREFIX):
            continue
        rest = name[len(LISTENER_PREFIX):]
        listener, _, setting = rest.partition(".")
        if listener.lower() not in lower:
            raise InvalidConfigError(f"{where}: {name}: {listener} is not one of the listeners ({', '.join(names)})")
        mech, _, tail = setting.partition(".")
        if tail in _PER_MECHANISM and mech.upper() not in ("SASL",):
            check_mechanism(mech, f"{where}: {name}", SERVED_MECHANISMS)
        elif mech == "oauthbearer" and (tail in OAUTHBEARER_NAMES or tail == CALLBACK_HANDLER):
            pass                    # resolved with the listener's mechanisms (_oauthbearer)
        elif setting not in _PER_LISTENER_NAMES:
            raise InvalidConfigError(f"{where}: " + unknown_message(setting, sorted(_PER_LISTENER_NAMES),
                                                                    f"per-listener setting (in {name})"))
        out.setdefault(lower[listener.lower()], {})[setting] = value
    return out


def _resolve(listener: Listener, values: dict, props: dict[str, str], overrides: dict[str, str],
             where: str) -> ListenerSecurity:
    settings: dict[str, str] = {}
    for key in _PER_LISTENER:
        if key.name in overrides:
            raw = overrides[key.name]
        elif key.name in props:
            raw = props[key.name]
        else:
            continue
        settings[key.name] = raw
    here = f"{where}: listener {listener.name}"
    mechanisms: tuple[str, ...] = ()
    logins: dict[str, JaasConfig] = {}
    reauth = SessionLifetimes()
    if listener.sasl:
        raw = settings.get("sasl.enabled.mechanisms")
        listed = SECURITY_KEYS["sasl.enabled.mechanisms"].parse(raw) if raw is not None else \
            values["sasl.enabled.mechanisms"]
        mechanisms = tuple(dict.fromkeys(check_mechanism(m, f"{here}: sasl.enabled.mechanisms", SERVED_MECHANISMS)
                                         for m in listed))
        if not mechanisms:
            raise InvalidConfigError(f"{here}: sasl.enabled.mechanisms is empty")
        shared = parse_jaas(settings["sasl.jaas.config"], f"listener {listener.name}: sasl.jaas.config") \
            if settings.get("sasl.jaas.config") else None
        for m in mechanisms:
            text = overrides.get(f"{m.lower()}.sasl.jaas.config")
            if text:
                setting = f"listener.name.{listener.name.lower()}.{m.lower()}.sasl.jaas.config"
                login = parse_jaas(text, setting)
                if login.module != MODULES[m]:
                    raise InvalidConfigError(f"{where}: {setting}: {m} logs in with {MODULES[m]}, not {login.module}")
                logins[m] = login
            elif shared is not None and shared.module == MODULES[m]:
                logins[m] = shared          # sasl.jaas.config serves the mechanisms of its module
        reauth = _session_lifetimes(listener, mechanisms, values, settings, overrides, where)
    else:
        given = sorted(k for k in overrides if k.endswith("." + REAUTH))     # a mechanism's
        if given:
            raise InvalidConfigError(f"{where}: listener.name.{listener.name.lower()}.{given[0]}: listener"
                                     f" {listener.name} is {listener.protocol}, not SASL: it has no sessions to"
                                     " re-authenticate")
    oauthbearer = _oauthbearer(listener, mechanisms, props, overrides, here)
    if listener.tls:
        from logcore.security.tls_context import client_auth, tls_versions, hostname_check
        tls_versions(settings, here)
        client_auth(settings, here)
        hostname_check(settings, here)
        if not (settings.get("ssl.keystore.location") or settings.get("ssl.keystore.certificate.chain")):
            raise InvalidConfigError(f"{here}: a TLS listener ({listener.protocol}) needs a keystore:"
                                     " ssl.keystore.location, or ssl.keystore.certificate.chain with ssl.keystore.key")
    return ListenerSecurity(listener, settings, mechanisms, logins, reauth, oauthbearer)


def _session_lifetimes(listener: Listener, mechanisms: tuple[str, ...], values: dict, settings: dict[str, str],
                       overrides: dict[str, str], where: str) -> SessionLifetimes:
    """connections.max.reauth.ms of the listener and of each of its mechanisms given one."""
    key = SECURITY_KEYS[REAUTH]
    base = key.parse(settings[REAUTH]) if REAUTH in settings else values[REAUTH]
    by_mechanism = {}
    for setting, raw in overrides.items():
        mech, _, tail = setting.partition(".")
        if tail != REAUTH:
            continue
        name = f"listener.name.{listener.name.lower()}.{setting}"
        if mech.upper() not in mechanisms:
            raise InvalidConfigError(f"{where}: {name}: {mech.upper()} is not enabled on listener {listener.name}"
                                     f" (sasl.enabled.mechanisms: {', '.join(mechanisms)})")
        try:
            by_mechanism[mech.upper()] = key.parse(raw)
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"{where}: {name}: {exc}") from None
    return SessionLifetimes(base, by_mechanism)


def _oauthbearer(listener: Listener, mechanisms: tuple[str, ...], props: dict[str, str], overrides: dict[str, str],
                 here: str) -> OAuthBearerSettings | None:
    """The listener's OAUTHBEARER settings (unprefixed, then its oauthbearer.-prefixed ones)."""
    prefixed = {k[len("oauthbearer."):]: v for k, v in overrides.items() if k.startswith("oauthbearer.")}
    if "OAUTHBEARER" not in mechanisms:
        if prefixed:
            raise InvalidConfigError(f"{here}: listener.name.{listener.name.lower()}.oauthbearer.{next(iter(prefixed))}"
                                     " is set but the listener does not enable OAUTHBEARER (sasl.enabled.mechanisms)")
        return None
    raw = {k: v for k, v in props.items() if k in OAUTHBEARER_NAMES}
    raw.update(prefixed)
    return OAuthBearerSettings.parse(raw, here)
