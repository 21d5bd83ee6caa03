"""`seglog consumer-groups`: kafka-consumer-groups through the Kafka protocol, with its flags.

    seglog consumer-groups --bootstrap-server H:P --list [--state]
    seglog consumer-groups --bootstrap-server H:P --describe --group G [--members | --state | --offsets]
    seglog consumer-groups --bootstrap-server H:P --reset-offsets --group G (--topic T[:P,P] | --all-topics)
        (--to-earliest | --to-latest | --to-datetime 2026-01-01T00:00:00.000 | --to-offset N | --shift-by N)
        (--dry-run | --execute)
    seglog consumer-groups --bootstrap-server H:P --delete --group G [--group G2]
    seglog consumer-groups --bootstrap-server H:P --delete-offsets --group G --topic T[:P,P]

The tables have Kafka's columns (GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
CONSUMER-ID HOST CLIENT-ID for --describe); an offset never committed and a lag that cannot be
known print `-`, as there. Offsets are reset only for an inactive group (Empty or unknown), as
Kafka's tool requires; without --execute nothing is written.
"""
from __future__ import annotations

import datetime
import struct
import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.tools.broker_routes import EARLIEST, LATEST, BrokerRoutes
from logcore.wire.client import KafkaError, error_name
from logcore.wire.error_codes import NONE

ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")
RESETS = ("to_earliest", "to_latest", "to_datetime", "to_offset", "shift_by")
INACTIVE = ("Empty", "Dead")


def cmd_consumer_groups(args, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise InvalidConfigError("Command must include exactly one action: --list, --describe, --delete,"
                                 " --reset-offsets, --delete-offsets")
    action = chosen[0]
    groups = args.group or []
    if action != "list" and not groups:
        raise InvalidConfigError(f"--{action.replace('_', '-')} needs --group G")
    with BrokerRoutes(args.bootstrap_server, client_id="seglog-consumer-groups") as routes:
        if action == "list":
            return _list(routes, args, out)
        if action == "describe":
            return max(_describe(routes, g, args, out) for g in groups)
        if action == "delete":
            return _delete(routes, groups, out)
        if action == "delete_offsets":
            return _delete_offsets(routes, groups[0], args, out)
        return max(_reset(routes, g, args, out) for g in groups)


# ------------------------------------------------------------------------------ --list
def _list(routes: BrokerRoutes, args, out: TextIO) -> int:
    groups = [g for g in routes.list_groups() if g[1] in ("consumer", "")]
    if args.state:
        _table(out, ["GROUP", "STATE"], [[g, state] for g, _, state in groups])
    else:
        for g, _, _ in groups:
            out.write(g + "\n")
    return 0


# ------------------------------------------------------------------------------ --describe
def _describe(routes: BrokerRoutes, group_id: str, args, out: TextIO) -> int:
    desc = routes.describe_group(group_id)
    state = desc.group_state
    if state == "Dead":
        out.write(f"Error: Consumer group '{group_id}' does not exist.\n")
        return 1
    if args.state:
        node, conn = routes.coordinator(group_id)
        _table(out, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
               [[group_id, f"{conn.host}:{conn.port} ({node})", desc.protocol_data or "", state,
                 str(len(desc.members))]])
        return 0
    if state == "Empty":
        out.write(f"\nConsumer group '{group_id}' has no active members.\n")
    elif state in ("PreparingRebalance", "CompletingRebalance"):
        out.write(f"\nWarning: Consumer group '{group_id}' is rebalancing.\n")
    assigned = {m.member_id: assignment_partitions(bytes(m.member_assignment)) for m in desc.members}
    if args.members:
        _table(out, ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
               [[group_id, m.member_id, m.client_host or "", m.client_id, str(len(assigned[m.member_id]))]
                for m in desc.members])
        return 0
    committed = routes.committed(group_id)
    owner = {tp: m for m in desc.members for tp in assigned[m.member_id]}
    tps = sorted(set(committed) | set(owner))
    ends = routes.list_offsets(tps, LATEST) if tps else {}
    rows = []
    for tp in tps:
        current = committed.get(tp)
        end = ends.get(tp)
        member = owner.get(tp)
        rows.append([group_id, tp[0], str(tp[1]), _or_dash(current), _or_dash(end),
                     _or_dash(end - current if current is not None and end is not None else None),
                     member.member_id if member else "-", (member.client_host or "-") if member else "-",
                     member.client_id if member else "-"])
    _table(out, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                 "HOST", "CLIENT-ID"], rows)
    return 0


def assignment_partitions(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a consumer protocol assignment (version, then topics with their
    partitions); [] when there is none or it does not parse (another protocol)."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(0, count)):
            (n,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2:pos + 2 + n].decode()
            pos += 2 + n
            (k,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(0, k)):
                out.append((topic, struct.unpack_from(">i", data, pos)[0]))
                pos += 4
        return out
    except (struct.error, UnicodeDecodeError):
        return []


# ------------------------------------------------------------------------------ --delete
def _delete(routes: BrokerRoutes, groups: list[str], out: TextIO) -> int:
    results = routes.delete_groups(groups)
    failed = {g: c for g, c in results.items() if c != NONE}
    done = ", ".join(f"'{g}'" for g in groups if results[g] == NONE)
    if not failed:
        out.write(f"Deletion of requested consumer groups ({done}) was successful.\n")
        return 0
    out.write("Error: Deletion of some consumer groups failed:\n")
    for g, c in failed.items():
        out.write(f"* Group '{g}' could not be deleted due to: {error_name(c)}\n")
    if done:
        out.write(f"\nThese consumer groups were deleted successfully: {done}\n")
    return 1


# ------------------------------------------------------------------------------ --delete-offsets
def _delete_offsets(routes: BrokerRoutes, group_id: str, args, out: TextIO) -> int:
    tps = _partitions(routes, args, group_id)
    code, results = routes.delete_offsets(group_id, tps)
    if code != NONE:
        out.write(f"Error: Deletion of offsets failed due to: {error_name(code)}\n")
        return 1
    failed = any(c != NONE for c in results.values())
    if failed:
        out.write("Error: Encounter some partition level error, see the follow-up details:\n")
    else:
        out.write(f"Request succeed for deleting offsets from group {group_id}.\n")
    _table(out, ["TOPIC", "PARTITION", "STATUS"],
           [[t, str(p), "Successful" if c == NONE else f"Error: {error_name(c)}"]
            for (t, p), c in sorted(results.items())])
    return 1 if failed else 0


# ------------------------------------------------------------------------------ --reset-offsets
def _reset(routes: BrokerRoutes, group_id: str, args, out: TextIO) -> int:
    modes = [m for m in RESETS if getattr(args, m) not in (None, False)]
    if len(modes) != 1:
        raise InvalidConfigError("--reset-offsets needs exactly one of --to-earliest, --to-latest,"
                                 " --to-datetime, --to-offset, --shift-by")
    if args.dry_run and args.execute:
        raise InvalidConfigError("give --dry-run or --execute, not both")
    desc = routes.describe_group(group_id)
    if args.execute and desc.group_state not in INACTIVE:
        raise KafkaError(f"Assignments can only be reset if the group '{group_id}' is inactive, but the current"
                         f" state is {desc.group_state}.")
    committed = routes.committed(group_id)
    tps = _partitions(routes, args, group_id, committed)
    earliest = routes.list_offsets(tps, EARLIEST)
    latest = routes.list_offsets(tps, LATEST)
    mode = modes[0]
    target: dict[tuple[str, int], int] = {}
    if mode == "to_earliest":
        target = dict(earliest)
    elif mode == "to_latest":
        target = dict(latest)
    elif mode == "to_offset":
        target = {tp: args.to_offset for tp in tps}
    elif mode == "shift_by":
        missing = [tp for tp in tps if tp not in committed]
        if missing:
            raise KafkaError(f"Cannot shift offset for partition {missing[0][0]}-{missing[0][1]} since there is"
                             " no current committed offset")
        target = {tp: committed[tp] + args.shift_by for tp in tps}
    else:
        at = parse_datetime(args.to_datetime)
        found = routes.list_offsets(tps, at)
        target = {tp: (o if o >= 0 else latest[tp]) for tp, o in found.items()}
    # As Kafka: an offset outside the log goes to its nearest end.
    target = {tp: min(max(o, earliest[tp]), latest[tp]) for tp, o in target.items()}
    if args.execute:
        errors = routes.commit(group_id, target)
        bad = {tp: c for tp, c in errors.items() if c != NONE}
        if bad:
            tp, c = next(iter(sorted(bad.items())))
            raise KafkaError(f"resetting the offsets of group {group_id!r} failed: {tp[0]}-{tp[1]}: {error_name(c)}", c)
    elif not args.dry_run:
        out.write("WARN: No action will be performed as the --execute option is missing. In a future major"
                  " release, the default behavior of this command will be to prompt the user before"
                  " executing the reset rather than doing a dry run. You should add the --dry-run option"
                  " explicitly if you are scripting this command and want to keep the current default"
                  " behavior without prompting.\n")
    _table(out, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
           [[group_id, t, str(p), str(o)] for (t, p), o in sorted(target.items())])
    return 0


def _partitions(routes: BrokerRoutes, args, group_id: str,
                committed: dict[tuple[str, int], int] | None = None) -> list[tuple[str, int]]:
    """The partitions --topic T[:P,P] (or --all-topics: those the group has offsets for) name."""
    if getattr(args, "all_topics", False):
        if args.topic:
            raise InvalidConfigError("give --topic or --all-topics, not both")
        committed = routes.committed(group_id) if committed is None else committed
        return sorted(committed)
    if not args.topic:
        raise InvalidConfigError("name the partitions with --topic T[:P,P] (or --all-topics)")
    out = []
    for spec in args.topic:
        name, _, parts = spec.partition(":")
        if parts:
            try:
                out += [(name, int(p)) for p in parts.split(",")]
            except ValueError:
                raise InvalidConfigError(f"--topic {spec}: partitions are numbers (T:0,1)") from None
        else:
            known = routes.partitions([name]).get(name)
            if known is None:
                raise KafkaError(f"topic {name!r} does not exist")
            out += [(name, p) for p in sorted(known)]
    return sorted(set(out))


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime, `YYYY-MM-DDTHH:mm:SS.sss` with an optional zone (Z, +01:00):
    milliseconds since the epoch; without a zone, this machine's local time, as Kafka."""
    try:
        value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidConfigError(f"--to-datetime {text}: not of the form YYYY-MM-DDTHH:mm:SS.sss") from None
    if value.tzinfo is None:
        value = value.astimezone()
    return int(value.timestamp() * 1000)


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table(out: TextIO, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    out.write("\n")
    for row in [header, *rows]:
        out.write(" ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n")


_EXAMPLES = """examples:
  seglog consumer-groups --bootstrap-server 127.0.0.1:9092 --list
  seglog consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group billing
  seglog consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group billing --topic clicks --to-earliest --execute
  seglog consumer-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group billing --all-topics --shift-by -10 --dry-run
  seglog consumer-groups --bootstrap-server 127.0.0.1:9092 --delete-offsets --group billing --topic clicks
  seglog consumer-groups --bootstrap-server 127.0.0.1:9092 --delete --group billing
"""


def add_parser(sub, formatter_class) -> None:
    """`seglog consumer-groups` in the CLI's subcommands."""
    p = sub.add_parser("consumer-groups", help="list, describe, reset, delete consumer groups through a broker",
                       description="Manage consumer groups (like kafka-consumer-groups), through the Kafka"
                                   " protocol.", epilog=_EXAMPLES, formatter_class=formatter_class)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]")
    p.add_argument("--list", action="store_true", help="list every consumer group")
    p.add_argument("--describe", action="store_true", help="a group's offsets and lag per partition")
    p.add_argument("--reset-offsets", action="store_true", help="reset an inactive group's offsets")
    p.add_argument("--delete", action="store_true", help="delete inactive groups and their offsets")
    p.add_argument("--delete-offsets", action="store_true", help="delete a group's offsets of --topic")
    p.add_argument("--group", action="append", metavar="GROUP", help="the group (repeatable)")
    p.add_argument("--members", action="store_true", help="with --describe: the members")
    p.add_argument("--state", action="store_true", help="with --describe or --list: the group state")
    p.add_argument("--offsets", action="store_true", help="with --describe: the offsets (the default)")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="the partitions (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--to-offset", type=int, metavar="N")
    p.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--dry-run", action="store_true", help="print the new offsets only (the default)")
    p.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.set_defaults(func=cmd_consumer_groups)
