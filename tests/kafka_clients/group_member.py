"""One Java consumer of a group (GroupMember.java, classic or KIP-848 protocol) as a process: its
JSON events go to a callback as they arrive, "stop" on stdin makes it leave. The consumer group
tests on a cluster and the group migration tests run their Java members through it."""
from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from java_check import CLIENT_JARS
from java_program import JavaProgram

HERE = Path(__file__).resolve().parent


def compile_group_member(kafka_jars, classes: Path) -> JavaProgram:
    """GroupMember.java with Kafka's client jars (raises JavaUnavailable without a JDK)."""
    jars = [j for j in kafka_jars.jars if j.name.startswith(CLIENT_JARS)]
    return JavaProgram.compile([HERE / "GroupMember.java", HERE / "Clients.java"], jars, classes,
                               kafka_jars.folder / "log4j2-tools.properties")


class GroupMemberProcess:
    """args: BOOTSTRAP GROUP TOPIC PROTOCOL [ASSIGNORS]; `on_event(dict)` gets each event line."""

    def __init__(self, program: JavaProgram, args: list[str], on_event: Callable[[dict], None], name: str):
        self.name = name
        self._on_event = on_event
        self.proc = program.popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.closed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                self._on_event(event)
                if event["event"] == "closed":
                    self.closed.set()

    def leave(self) -> None:
        """Leave the group (the consumer's close) and wait for the process to end."""
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        assert self.closed.wait(30), f"{self.name} did not close"
        self.proc.wait(10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
