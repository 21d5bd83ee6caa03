"""The markdown tables of the APIs the broker serves, printed from what ApiVersions advertises
(api_versions.SERVED for every broker, CLUSTER_SERVED for a cluster member), so that the docs
cannot drift from the broker: docs/broker.md and docs/cli.md hold them between marker comments
and tests/broker/test_api_table.py compares.

    python -m logcore.broker.api_table broker|cli         print one table
    python -m logcore.broker.api_table --update FILE...   rewrite the marked tables in FILEs

A marked table is the text between `<!-- api-table:broker -->` (or `cli`) and `<!-- /api-table -->`.
An API served without a line in NOTES gets an empty notes cell, never a missing row.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from logcore.broker.api_versions import ADVERTISED_MIN, CLUSTER_SERVED, SERVED

BEGIN = "<!-- api-table:{style} -->"
END = "<!-- /api-table -->"
STYLES = ("broker", "cli")

# api key -> what the broker does with it (docs/broker.md's notes column)
NOTES: dict[int, str] = {
    0: "RecordBatch v2 only; acks 0, 1, -1; one batch per partition; v0-2 answered UNSUPPORTED_VERSION"
       " per partition",
    1: "v13+ by topic id; incremental fetch sessions (KIP-227)",
    2: "earliest (-2: the log start, remote included), latest (-1), max timestamp (-3), earliest local"
       " (-4: the local log start, KIP-405), by timestamp (remote tier included)",
    3: "alone: one broker, leader of everything; in a cluster: the brokers, leaders and ISRs of"
       " ZooKeeper's metadata",
    8: "generation-checked; simple (assign()) commits while the group has no members",
    9: "v8+ several groups per request; unknown offsets answer -1",
    10: "groups: this broker alone, in a cluster the leader of the group's `__consumer_offsets`"
        " partition; key type 1: the transaction coordinator; v4+ several keys",
    11: "v4+: the MEMBER_ID_REQUIRED two-step join (KIP-394)",
    12: "the classic group protocol's liveness; REBALANCE_IN_PROGRESS asks the member to rejoin",
    13: "the member leaves, the group rebalances; v3+ a batch of members by instance id (KIP-345)",
    14: "the leader's assignment handed to each member",
    15: "Kafka's classic summary: state, protocol, members; an unknown group is `Dead`",
    16: "every group of the coordinator, classic and consumer; state (v4) and type (v5) filters",
    17: "SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 ([security.md](security.md)); v0's bare tokens;"
        " a second handshake re-authenticates (KIP-368)",
    18: "an unknown version is answered in v0 with UNSUPPORTED_VERSION",
    19: "topic configs; validate_only; alone: replication factor -1 or 1",
    20: "by name or (v6) topic id",
    21: "moves the log start of each partition on its leader; answered once the in-sync replicas"
        " follow",
    22: "idempotent producers; KIP-360 epoch bump; a transactional id: the transaction coordinator",
    23: "from the partition's leader-epoch cache (KIP-101/279 end offsets)",
    24: "transactions ([transactions.md](transactions.md)); v4 is the brokers' verification (KIP-890)",
    25: "transactions",
    26: "transactions",
    27: "from a transaction coordinator, or an admin's abort of a hanging transaction"
        " (`kafka-transactions abort`)",
    28: "transactions (KIP-447 generation checks)",
    29: "ACLs ([security.md](security.md#authorization)); cluster DESCRIBE; SECURITY_DISABLED without"
        " `authorizer.class.name`",
    30: "ACLs in ZooKeeper's `/kafka-acl` as Kafka's AclAuthorizer (alone: the log root); cluster ALTER",
    31: "ACLs; cluster ALTER",
    32: "topics, groups (KIP-848's per-group configs) and brokers (this broker, or `\"\"` the cluster default), with Kafka's sources and"
        " synonyms (topic override, per-broker dynamic, dynamic default, static, default)",
    33: "the legacy full replace of a resource's dynamic configs",
    35: "the broker's log dir: each partition's size and offset lag; total and usable bytes (v4,"
        " -1 on an object store)",
    36: "the SASL tokens; v1+ session_lifetime_ms from connections.max.reauth.ms",
    37: "grow topics (never shrink: INVALID_PARTITIONS)",
    43: "preferred and unclean elections, through the controller",
    42: "an empty group's offsets and metadata tombstoned; NON_EMPTY_GROUP for a group with members",
    44: "SET, DELETE, APPEND, SUBTRACT; validate_only; topic overrides, group configs and dynamic broker configs,"
        " applied at once ([Dynamic configs](#dynamic-configs))",
    45: "moves replicas (docs/cluster.md, partition reassignment)",
    46: "the ongoing reassignments",
    47: "a group's offsets of a topic its members do not subscribe",
    48: "client quotas by user and client id ([quotas.md](quotas.md)); exact, default and any matches, strict",
    49: "producer_byte_rate, consumer_byte_rate, request_percentage; alone: in the log root, in a cluster:"
        " ZooKeeper's /config/users and /config/clients",
    50: "users' SCRAM mechanisms and iterations ([security.md](security.md))",
    51: "SCRAM credentials salted and hashed as Kafka stores them (ZooKeeper `/config/users`, alone the root)",
    60: "the brokers, the cluster id and the controller (alone: itself)",
    61: "the active producers of a partition's producer state, from its leader",
    65: "`kafka-transactions describe`",
    66: "`kafka-transactions list`; state and producer id filters",
    68: "KIP-848's consumer group protocol ([consumer-groups.md](consumer-groups.md)); not advertised"
        " when `group.coordinator.rebalance.protocols` leaves out `consumer`",
    69: "KIP-848's consumer groups, described",
    74: "v1: the groups with configs of their own, the brokers, the topics (`kafka-configs --describe"
        " --entity-type groups`)",
}


def versions(key: int, lo: int, hi: int) -> str:
    shown = f"{lo}-{hi}" if lo != hi else f"{lo}"
    advertised_lo = ADVERTISED_MIN.get(key, lo)
    if advertised_lo != lo:
        shown += f" (advertised {advertised_lo}-{hi})"
    return shown


def rows() -> list[tuple[int, str, str, bool]]:
    """(api key, name, versions, cluster member only) of every API a broker can advertise."""
    out = [(k, name, versions(k, lo, hi), False) for k, (name, lo, hi) in SERVED.items()]
    out += [(k, name, versions(k, lo, hi), True) for k, (name, lo, hi) in CLUSTER_SERVED.items()
            if k not in SERVED]
    return sorted(out)


def table(style: str) -> str:
    """The markdown table: `broker` with notes, `cli` the short form."""
    if style not in STYLES:
        raise ValueError(f"unknown table style {style!r}: one of {', '.join(STYLES)}")
    lines = []
    if style == "broker":
        lines += ["| key | API | versions | served by | notes |", "|---|---|---|---|---|"]
    else:
        lines += ["| key | API | versions | served by |", "|---|---|---|---|"]
    for key, name, shown, cluster_only in rows():
        where = "a cluster member" if cluster_only else "every broker"
        cells = [str(key), name, shown, where]
        if style == "broker":
            cells.append(NOTES.get(key, ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _pattern(style: str) -> re.Pattern:
    return re.compile(re.escape(BEGIN.format(style=style)) + r"\n(.*?)" + re.escape(END), re.S)


def marked(text: str, style: str) -> str | None:
    """The table between `style`'s markers in `text`, or None when it has none."""
    found = _pattern(style).search(text)
    return found.group(1) if found else None


def update(text: str) -> str:
    """`text` with every marked table replaced by the generated one."""
    for style in STYLES:
        text = _pattern(style).sub(lambda _m, s=style: BEGIN.format(style=s) + "\n" + table(s) + END, text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m logcore.broker.api_table",
                                     description="Print the served-API tables from api_versions.py.")
    parser.add_argument("style", nargs="?", choices=STYLES, default="broker")
    parser.add_argument("--update", nargs="+", metavar="FILE", help="rewrite the marked tables in these files")
    args = parser.parse_args(argv)
    if args.update:
        for name in args.update:
            path = Path(name)
            text = path.read_text(encoding="utf-8")
            if not any(marked(text, s) is not None for s in STYLES):
                print(f"{name}: no {BEGIN.format(style='...')} marker", file=sys.stderr)
                return 1
            path.write_text(update(text), encoding="utf-8")
        return 0
    sys.stdout.write(table(args.style))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
