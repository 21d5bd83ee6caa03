"""A `seglog broker` subprocess on a free loopback port, over a test's log root: how the broker
fixtures (tests/broker/conftest.py) and the tests that need their own brokers start one. Each
broker is stopped by the process id it was started with (SIGTERM, SIGKILL if it does not exit).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
import broker_spawner

START_TIMEOUT = 30


@dataclass
class RunningBroker:
    proc: subprocess.Popen
    root: Path
    host: str
    port: int
    stderr_path: Path

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def log_text(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def subprocess_env() -> dict:
    """The environment a `seglog` subprocess of a test runs with (this checkout first)."""
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "connector")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def listening_line(proc: subprocess.Popen, timeout: float) -> str:
    """The first line a starting broker writes on its stdout (`... listening on
    NAME://host:port,...` once it serves); '' when it exited first. Lines are read until
    `timeout` seconds have passed (a read itself waits for its line)."""
    deadline = time.monotonic() + timeout
    line = b""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line or proc.poll() is not None:
            break
    return line.decode().strip()


def start_factory(base: Path, started: list):
    """A function that starts a broker over a root below `base` (its settings as keywords) and
    appends it to `started`, whose brokers the caller stops."""
    counter = [0]

    def start(root: Path | None = None, *, preexec_fn=None, **props) -> RunningBroker:
        """props: broker settings; preexec_fn: run in the broker process before it starts
        (e.g. resource.setrlimit for a low open-file limit)."""
        root = root or base / "logs"
        counter[0] += 1
        conf = base / f"broker-{counter[0]}.properties"
        settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(root), "node.id": "0",
                    "num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}
        # Python names stand for dotted ones (log_retention_ms); a name given with its dots is
        # kept as is (rsm.config.storage.endpoint_url has underscores of its own).
        settings.update({k if "." in k else k.replace("_", "."): str(v) for k, v in props.items()})
        conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        err = base / f"broker-{counter[0]}.stderr"
        with open(err, "wb") as err_file:
            # forked from an interpreter with the CLI imported (tests/broker_spawner.py); with a
            # preexec_fn, a fresh process
            proc = broker_spawner.popen([sys.executable, "-m", "logcore.tools.cli", "broker", "--config", str(conf)],
                                        stdout=subprocess.PIPE, stderr=err_file, env=subprocess_env(), cwd=base,
                                        preexec_fn=preexec_fn)
        broker = RunningBroker(proc, root, "", 0, err)
        started.append(broker)
        text = listening_line(proc, START_TIMEOUT)
        if "listening on PLAINTEXT://" not in text:
            broker.stop(signal.SIGKILL)
            pytest.fail(f"broker did not start: {text!r}\n{err.read_text(errors='replace')[-3000:]}")
        host, port = text.rsplit("//", 1)[1].rsplit(":", 1)
        broker.host, broker.port = host, int(port)
        return broker

    return start
