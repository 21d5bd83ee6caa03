"""`seglog leader-election`: kafka-leader-election.sh through the Kafka protocol (ElectLeaders).

    seglog leader-election --bootstrap-server H:P --election-type preferred|unclean
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)

Prints what Kafka 4.1's LeaderElectionCommand prints, partitions sorted:
`Successfully completed leader election (PREFERRED) for partitions T-0, T-1`,
`Valid replica already elected for partitions T-2` (ELECTION_NOT_NEEDED, for partitions named
by --topic or --path-to-json-file; with --all-topic-partitions only what moved), and for each
failure `Error completing leader election (PREFERRED) for partition: T-3: NAME: message`, then
exits 1 (`N replica(s) could not be elected`). A broker that does not serve ElectLeaders is an
error naming it.
"""
from __future__ import annotations

import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.tools.arguments import json_file
from logcore.tools.client_properties import client_properties, client_security, timeout_s
from logcore.tools.kafka_admin import KafkaAdmin
from logcore.wire.client import KafkaError, error_name
from logcore.wire.error_codes import ELECTION_NOT_NEEDED, NONE


def cmd_leader_election(args, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    kind = args.election_type.lower()
    partitions = _partitions(args)
    props = client_properties(getattr(args, "command_config", None), None, (),
                              command="seglog leader-election", item_option="--command-config")
    with KafkaAdmin(args.bootstrap_server, client_id=props.get("client.id", "seglog-leader-election"),
                    timeout_ms=int(timeout_s(props) * 1000), security=client_security(props)) as admin:
        results = admin.elect_leaders(kind, partitions)
    label = kind.upper()
    ordered = sorted(results.items())
    done = [tp for tp, (code, _) in ordered if code == NONE]
    # With --all-topic-partitions only what moved or failed is listed: Kafka's controller leaves
    # the partitions that need no election out of its answer when asked for all of them (its
    # tool then prints nothing for them), and a broker that lists them is not repeated here.
    noop = [] if partitions is None else [tp for tp, (code, _) in ordered if code == ELECTION_NOT_NEEDED]
    failed = [(tp, code, message) for tp, (code, message) in ordered if code not in (NONE, ELECTION_NOT_NEEDED)]
    if done:
        out.write(f"Successfully completed leader election ({label}) for partitions {_names(done)}\n")
    if noop:
        out.write(f"Valid replica already elected for partitions {_names(noop)}\n")
    for (topic, partition), code, message in failed:
        out.write(f"Error completing leader election ({label}) for partition: {topic}-{partition}:"
                  f" {error_name(code)}{': ' + message if message else ''}\n")
    if failed:
        raise KafkaError(f"{len(failed)} replica(s) could not be elected", failed[0][1])
    return 0


def _names(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def _partitions(args) -> list[tuple[str, int]] | None:
    """The partitions asked for; None for --all-topic-partitions."""
    given = [name for name, on in (("--topic", args.topic is not None), ("--all-topic-partitions", args.all_topic_partitions),
                                   ("--path-to-json-file", args.path_to_json_file is not None)) if on]
    if len(given) != 1:
        raise InvalidConfigError("give exactly one of --topic (with --partition), --all-topic-partitions,"
                                 f" --path-to-json-file{' (got ' + ', '.join(given) + ')' if given else ''}")
    if args.partition is not None and args.topic is None:
        raise InvalidConfigError("--partition applies with --topic only")
    if args.topic is not None:
        if args.partition is None:
            raise InvalidConfigError("--topic needs --partition P")
        return [(args.topic, args.partition)]
    if args.all_topic_partitions:
        return None
    return _json_partitions(args.path_to_json_file)


def _json_partitions(path: str) -> list[tuple[str, int]]:
    """`{"partitions": [{"topic": "foo", "partition": 1}, ...]}`, as kafka-leader-election reads it."""
    data = json_file(path, "--path-to-json-file")
    items = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise InvalidConfigError(f"--path-to-json-file {path}: Replica election data is missing \"partitions\" field")
    out = []
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and isinstance(item.get("topic"), str) and type(item.get("partition")) is int):
            raise InvalidConfigError(f"--path-to-json-file {path}: partitions[{i}] is not"
                                     " {\"topic\": name, \"partition\": number}")
        out.append((item["topic"], item["partition"]))
    duplicates = sorted({tp for tp in out if out.count(tp) > 1})
    if duplicates:
        raise InvalidConfigError(f"--path-to-json-file {path}: Replica election data contains duplicate partitions: "
                                 + ",".join(f"{t}-{p}" for t, p in duplicates))
    return out
