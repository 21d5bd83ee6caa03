"""`seglog delete-records`: kafka-delete-records through the Kafka protocol (DeleteRecords at each
partition's leader).

    seglog delete-records --bootstrap-server H:P --offset-json-file F.json

F.json is Kafka's: {"partitions": [{"topic": "t", "partition": 0, "offset": 40}], "version": 1}
(offset -1: the high watermark). Prints, as Kafka's DeleteRecordsCommand, one line per
partition: `partition: t-0\tlow_watermark: 40`, or `partition: t-1\terror: NAME` (then exits 1).
"""
from __future__ import annotations

import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.tools.arguments import json_file
from logcore.tools.broker_routes import BrokerRoutes
from logcore.wire.client import KafkaError, error_name
from logcore.wire.error_codes import NONE


def cmd_delete_records(args, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    offsets = read_offsets(args.offset_json_file)
    out.write("Executing records delete operation\n")
    with BrokerRoutes(args.bootstrap_server, client_id="seglog-delete-records") as routes:
        results = routes.delete_records(offsets)
    out.write("Records delete operation completed:\n")
    failed = 0
    for (topic, partition), (code, low) in sorted(results.items()):
        if code == NONE:
            out.write(f"partition: {topic}-{partition}\tlow_watermark: {low}\n")
        else:
            failed += 1
            out.write(f"partition: {topic}-{partition}\terror: {error_name(code)}\n")
    if failed:
        raise KafkaError(f"records of {failed} partition(s) could not be deleted")
    return 0


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    """The partitions and offsets of a kafka-delete-records JSON file."""
    data = json_file(path, "--offset-json-file")
    if not isinstance(data, dict) or data.get("version", 1) != 1:
        raise InvalidConfigError(f"--offset-json-file {path}: not supported version field value"
                                 f" {data.get('version') if isinstance(data, dict) else data!r}")
    items = data.get("partitions")
    if not isinstance(items, list) or not items:
        raise InvalidConfigError(f"--offset-json-file {path}: no \"partitions\" to delete records of")
    out: dict[tuple[str, int], int] = {}
    duplicates = []
    for i, item in enumerate(items):
        if not (isinstance(item, dict) and isinstance(item.get("topic"), str)
                and type(item.get("partition")) is int and type(item.get("offset")) is int):
            raise InvalidConfigError(f"--offset-json-file {path}: partitions[{i}] is not"
                                     " {\"topic\": name, \"partition\": number, \"offset\": number}")
        tp = (item["topic"], item["partition"])
        if tp in out:
            duplicates.append(tp)
        out[tp] = item["offset"]
    if duplicates:
        raise InvalidConfigError(f"--offset-json-file {path}: Offset json file contains duplicate topic partitions: "
                                 + ",".join(f"{t}-{p}" for t, p in duplicates))
    return out


def add_parser(sub, formatter_class) -> None:
    """`seglog delete-records` in the CLI's subcommands."""
    p = sub.add_parser("delete-records", help="move partitions' log start offsets through a broker",
                       description="Delete the records of partitions below an offset (like"
                                   " kafka-delete-records), through the Kafka protocol's DeleteRecords.",
                       epilog='example:\n  seglog delete-records --bootstrap-server 127.0.0.1:9092'
                              ' --offset-json-file del.json\n\ndel.json:\n  {"partitions": [{"topic": "clicks",'
                              ' "partition": 0, "offset": 1000}], "version": 1}\n(offset -1: the high watermark)',
                       formatter_class=formatter_class)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]")
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions": [{"topic": "t", "partition": 0, "offset": 40}], "version": 1}')
    p.set_defaults(func=cmd_delete_records)
