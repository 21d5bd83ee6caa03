"""Which ZooKeeper ACL each znode a broker creates gets: Kafka's `zookeeper.set.acl` as two named
policies, and the kazoo client that applies the policy to every create (plain, ensure_path and
inside transactions), so no call site has to remember it.

- OPEN (zookeeper.set.acl=false, Kafka's default): ZooKeeper's world:anyone ALL.
- SECURE (zookeeper.set.acl=true): Kafka's ZkData.defaultAcls: the creator's authenticated
  identity (sasl:<user>) ALL, plus world:anyone READ except under the sensitive roots
  /config/users (SCRAM credentials), /config/brokers (broker configs may hold passwords) and
  /delegation_token, which only the creator may read; /consumers (the old consumers' path)
  stays open as in Kafka.
"""
from __future__ import annotations

SENSITIVE_ROOTS = ("/config/users", "/config/brokers", "/delegation_token")
OPEN_PATH = "/consumers"


class ZnodeAcls:
    """A policy: the ACL list for a new znode at `path` (None: ZooKeeper's open default)."""
    name = "open"

    def for_path(self, path: str):
        return None


class SecureZnodeAcls(ZnodeAcls):
    name = "secure"

    def for_path(self, path: str):
        from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE
        if path == OPEN_PATH:
            return list(OPEN_ACL_UNSAFE)
        if path.startswith(SENSITIVE_ROOTS):
            return list(CREATOR_ALL_ACL)
        return list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)


OPEN = ZnodeAcls()
SECURE = SecureZnodeAcls()


def znode_acls(set_acl: bool) -> ZnodeAcls:
    """The policy Kafka's zookeeper.set.acl names."""
    return SECURE if set_acl else OPEN


def kazoo_client(hosts: str, timeout_s: float, acls: ZnodeAcls, sasl_options: dict | None, handler=None):
    """A KazooClient whose creates without an explicit ACL get `acls.for_path(path)` (the path as
    the caller gave it, below any chroot), logging in with `sasl_options` when given, its
    connections made by `handler` when given (TLS: logcore.cluster.tls_handler)."""
    from kazoo.client import KazooClient, TransactionRequest

    class PolicyTransaction(TransactionRequest):
        def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
            acl = acls.for_path(path) if acl is None else acl
            return super().create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)

    class PolicyClient(KazooClient):
        def create_async(self, path, value=b"", acl=None, ephemeral=False, sequence=False, makepath=False,
                         include_data=False):
            acl = acls.for_path(path) if acl is None else acl
            return super().create_async(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence,
                                        makepath=makepath, include_data=include_data)

        def transaction(self):
            return PolicyTransaction(self)

    return PolicyClient(hosts=hosts, timeout=timeout_s, sasl_options=sasl_options, handler=handler,
                        use_ssl=handler is not None)
