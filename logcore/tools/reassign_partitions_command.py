"""`seglog reassign-partitions`: kafka-reassign-partitions.sh through the Kafka protocol
(AlterPartitionReassignments, ListPartitionReassignments).

    seglog reassign-partitions --bootstrap-server H:P --reassignment-json-file F
        (--execute [--additional] | --verify | --cancel)
    seglog reassign-partitions --bootstrap-server H:P --list

F is Kafka's reassignment JSON: `{"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[2,3]}]}` (`log_dirs`, when given, must be "any": a seglog broker has one log dir).
The output is Kafka 4.1's ReassignPartitionsCommand's: --execute prints the current assignment
as JSON to save for a rollback and `Successfully started partition reassignment(s) for ...`;
--verify prints `Status of partition reassignment:` and per partition `... is completed.`,
`... is still in progress.` or `There is no active reassignment of partition T-P, but replica
set is ... rather than ....`; --cancel reverts the listed partitions that are moving to their
original replicas. `--execute --throttle R` throttles the moving replicas' replication to R
bytes/s before the moves start, and `--verify`, once none of the file's partitions moves, clears
the throttles (unless --preserve-throttles), as Kafka's tool does (logcore.tools.reassignment_throttle).
Refused partitions are listed with Kafka's error and exit status 1.
"""
from __future__ import annotations

import json
import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.tools.arguments import json_file
from logcore.tools.client_properties import client_properties, client_security, timeout_s
from logcore.tools.config_admin import ConfigAdmin
from logcore.tools.kafka_admin import KafkaAdmin
from logcore.tools.reassignment_throttle import VERIFY_WARNING, clear_throttles, move_map, set_throttle
from logcore.wire.client import KafkaError, error_name
from logcore.wire.error_codes import NONE


def cmd_reassign_partitions(args, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    actions = [a for a in ("execute", "verify", "cancel", "list") if getattr(args, a)]
    if len(actions) != 1:
        raise InvalidConfigError("give exactly one of --execute, --verify, --cancel, --list"
                                 + (f" (got {', '.join('--' + a for a in actions)})" if actions else ""))
    action = actions[0]
    if action != "list" and not args.reassignment_json_file:
        raise InvalidConfigError(f"--{action} needs --reassignment-json-file")
    if args.additional and action != "execute":
        raise InvalidConfigError("--additional applies with --execute only")
    throttle = getattr(args, "throttle", -1)
    if throttle != -1 and action != "execute":
        raise InvalidConfigError("--throttle applies with --execute only")
    if throttle < -1:
        raise InvalidConfigError(f"--throttle {throttle}: give a rate in bytes per second (at least 0)")
    preserve = getattr(args, "preserve_throttles", False)
    if preserve and action != "verify":
        raise InvalidConfigError("--preserve-throttles applies with --verify only")
    plan = read_plan(args.reassignment_json_file) if action != "list" else {}
    props = client_properties(getattr(args, "command_config", None), None, (),
                              command="seglog reassign-partitions", item_option="--command-config")
    client_id, wait_s, security = props.get("client.id", "seglog-reassign-partitions"), timeout_s(props), \
        client_security(props)

    def configs() -> ConfigAdmin:
        return ConfigAdmin(args.bootstrap_server, timeout_s=wait_s + 5, client_id=client_id, security=security)

    with KafkaAdmin(args.bootstrap_server, client_id=client_id, timeout_ms=int(wait_s * 1000),
                    security=security) as admin:
        if action == "list":
            return _list(admin, out)
        if action == "execute":
            return _execute(admin, plan, args.additional, throttle, configs, out)
        if action == "verify":
            return _verify(admin, plan, None if preserve else configs, out)
        return _cancel(admin, plan, out)


def _names(tps) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


def _ids(ids) -> str:
    return ",".join(str(b) for b in ids)


def plan_json(assignment: dict[tuple[str, int], list[int]]) -> str:
    """Kafka's formatAsReassignmentJson (log dirs all "any")."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())]}, separators=(",", ":"))


def _current(admin: KafkaAdmin, parts) -> dict[tuple[str, int], list[int]]:
    infos = admin.describe_topics(sorted({t for t, _ in parts}))
    found = {(i.name, p.partition): list(p.replicas) for i in infos for p in i.partitions}
    missing = [tp for tp in parts if tp not in found]
    if missing:
        raise KafkaError(f"Unable to find partition(s): {_names(missing)}", 3)
    return {tp: found[tp] for tp in parts}


def _execute(admin: KafkaAdmin, plan, additional: bool, throttle: int, configs, out: TextIO) -> int:
    """`configs()`: a ConfigAdmin on the same servers (the throttle's IncrementalAlterConfigs)."""
    in_progress = admin.list_partition_reassignments()
    if not additional and in_progress:
        raise KafkaError("Cannot execute because there is an existing partition assignment.  Use --additional"
                         " to override this and create a new partition assignment in addition to the existing"
                         " one. The --additional flag can also be used to change the throttle by resubmitting"
                         " the current reassignment.")
    current = _current(admin, list(plan))
    out.write(f"Current partition replica assignment\n\n{plan_json(current)}\n\n"
              "Save this to use as the --reassignment-json-file option during rollback\n")
    if throttle >= 0:
        out.write(f"{VERIFY_WARNING}\nThe inter-broker throttle limit was set to {throttle} B/s\n")
        with configs() as config_admin:
            set_throttle(config_admin, move_map(in_progress, plan, current), throttle)
    results = admin.alter_partition_reassignments(plan)
    _raise_refused("Error reassigning partition(s)", results)
    out.write(f"Successfully started partition reassignment{'' if len(plan) == 1 else 's'} for {_names(plan)}\n")
    return 0


def _verify(admin: KafkaAdmin, plan, configs, out: TextIO) -> int:
    """`configs()`: a ConfigAdmin to clear the throttles through once nothing of the plan moves
    (None: --preserve-throttles)."""
    moving = admin.list_partition_reassignments()
    settled = _current(admin, [tp for tp in plan if tp not in moving]) if any(tp not in moving for tp in plan) else {}
    lines = ["Status of partition reassignment:"]
    for tp in sorted(plan):
        name = f"{tp[0]}-{tp[1]}"
        if tp in moving:
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif settled[tp] == list(plan[tp]):
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {name}, but replica set is"
                         f" {_ids(settled[tp])} rather than {_ids(plan[tp])}.")
    out.write("\n".join(lines) + "\n\n")
    if configs is not None and not any(tp in moving for tp in plan):
        with configs() as config_admin:
            clear_throttles(config_admin, admin.broker_ids(), plan, out)
    return 0


def _cancel(admin: KafkaAdmin, plan, out: TextIO) -> int:
    moving = admin.list_partition_reassignments()
    active = sorted(tp for tp in plan if tp in moving)
    if active:
        results = admin.alter_partition_reassignments({tp: None for tp in active})
        _raise_refused("Error cancelling partition reassignment", results)
        out.write(f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} for:"
                  f" {_names(active)}\n")
    else:
        out.write("None of the specified partition reassignments are active.\n")
    return 0


def _list(admin: KafkaAdmin, out: TextIO) -> int:
    moving = admin.list_partition_reassignments()
    if not moving:
        out.write("No partition reassignments found.\n")
        return 0
    out.write("Current partition reassignments:\n")
    for (t, p), r in sorted(moving.items()):
        line = f"{t}-{p}: replicas: {_ids(r.replicas)}."
        if r.adding:
            line += f" adding: {_ids(r.adding)}."
        if r.removing:
            line += f" removing: {_ids(r.removing)}."
        out.write(line + "\n")
    return 0


def _raise_refused(what: str, results) -> None:
    failed = sorted((tp, code, message) for tp, (code, message) in results.items() if code != NONE)
    if failed:
        detail = "\n".join(f"{t}-{p}: {error_name(code)}{': ' + message if message else ''}"
                           for (t, p), code, message in failed)
        raise KafkaError(f"{what}{'' if len(failed) == 1 else 's'} for:\n{detail}", failed[0][1])


def read_plan(path: str) -> dict[tuple[str, int], list[int]]:
    """Kafka's reassignment JSON: {(topic, partition): replicas}."""
    data = json_file(path, "--reassignment-json-file")
    items = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise InvalidConfigError(f"--reassignment-json-file {path}: no \"partitions\" list")
    if not items:
        raise InvalidConfigError(f"--reassignment-json-file {path}: Partition reassignment list cannot be empty")
    plan: dict[tuple[str, int], list[int]] = {}
    for i, item in enumerate(items):
        ok = (isinstance(item, dict) and isinstance(item.get("topic"), str) and type(item.get("partition")) is int
              and isinstance(item.get("replicas"), list) and all(type(b) is int for b in item["replicas"]))
        if not ok:
            raise InvalidConfigError(f"--reassignment-json-file {path}: partitions[{i}] is not"
                                     " {\"topic\": name, \"partition\": number, \"replicas\": [broker ids]}")
        dirs = item.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or any(d != "any" for d in dirs)):
            raise InvalidConfigError(f"--reassignment-json-file {path}: partitions[{i}].log_dirs {dirs!r}: a seglog"
                                     " broker has one log dir; give \"any\" or leave log_dirs out")
        key = (item["topic"], item["partition"])
        if key in plan:
            raise InvalidConfigError(f"--reassignment-json-file {path}: Duplicate reassignment partitions:"
                                     f" {key[0]}-{key[1]}")
        if len(set(item["replicas"])) != len(item["replicas"]):
            raise InvalidConfigError(f"--reassignment-json-file {path}: Duplicate replica assignment found for"
                                     f" partition {key[0]}-{key[1]}: {item['replicas']}")
        plan[key] = list(item["replicas"])
    return plan
