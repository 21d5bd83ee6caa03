"""The kafka-configs (ConfigCommand) calls on client quota entities that the quota tests run
against Apache Kafka and against seglog, and what Kafka 4.1 answered to them (checked against a
real Kafka broker in test_quota_configs_reference.py; the cluster test expects the same)."""
from __future__ import annotations

import re

CONFIG_COMMAND = "kafka.admin.ConfigCommand"

CALLS = [
    ("--entity-type", "clients", "--entity-name", "slow", "--alter", "--add-config",
     "producer_byte_rate=1024,request_percentage=12.5"),
    ("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-default",
     "--alter", "--add-config", "consumer_byte_rate=4096"),
    ("--entity-type", "clients", "--entity-name", "slow", "--alter", "--delete-config", "request_percentage"),
    ("--entity-type", "clients", "--describe"),
    ("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--describe"),
    ("--entity-type", "clients", "--entity-name", "x", "--alter", "--add-config", "producer_byte_rate=1.5"),
]

# Kafka 4.1.1's answers: (exit status, stdout lines with each line's settings as a set (Kafka's
# order is a hash map's), the exception's class and message)
KAFKA_ANSWERS = [
    (0, [("Completed updating config for client slow.", None)], None),
    (0, [("Completed updating config for user alice.", None)], None),
    (0, [("Completed updating config for client slow.", None)], None),
    (0, [("Quota configs for client-id 'slow' are", frozenset({"producer_byte_rate=1024.0"}))], None),
    (0, [("Quota configs for user-principal 'alice', the default client-id are",
          frozenset({"consumer_byte_rate=4096.0"}))], None),
    (1, [], "org.apache.kafka.common.errors.InvalidRequestException: producer_byte_rate cannot be a fractional value."),
]

_SETTINGS = re.compile(r"^(?P<head>.* are) (?P<settings>.*)$")


def answer(run) -> tuple:
    """(exit status, lines, exception) of one ConfigCommand run, comparable to KAFKA_ANSWERS."""
    lines = []
    for line in run.stdout.splitlines():
        m = _SETTINGS.match(line)
        if m and line.startswith("Quota configs"):
            lines.append((m["head"], frozenset(s.strip() for s in m["settings"].split(","))))
        elif line.strip():
            lines.append((line.strip(), None))
    caused = re.search(r"Caused by: (\S+: .*)", run.stderr)
    return run.returncode, lines, caused[1].strip() if caused else None


def session(jars, bootstrap: str, calls=range(len(CALLS))) -> list[tuple]:
    """The answers to CALLS (or those of the given indexes), in order."""
    runs = jars.run_tools([(CONFIG_COMMAND, ["--bootstrap-server", bootstrap, *CALLS[i]]) for i in calls])  # one JVM
    return [answer(run) for run in runs]
