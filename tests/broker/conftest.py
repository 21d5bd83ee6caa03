"""Broker fixtures: a `seglog broker` subprocess on a free loopback port, over a tmp log root.

`broker_factory(root)` starts one and returns a RunningBroker; every broker a test started is
stopped (SIGTERM to the process id it started, SIGKILL if it does not exit) when the test ends.
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import broker_spawner  # noqa: E402
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


def _env() -> dict:
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "connector")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _start_factory(base: Path, started: list):
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
                                        stdout=subprocess.PIPE, stderr=err_file, env=_env(), cwd=base,
                                        preexec_fn=preexec_fn)
        broker = RunningBroker(proc, root, "", 0, err)
        started.append(broker)
        deadline = time.monotonic() + START_TIMEOUT
        line = b""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line or proc.poll() is not None:
                break
        text = line.decode().strip()
        if "listening on PLAINTEXT://" not in text:
            broker.stop(signal.SIGKILL)
            pytest.fail(f"broker did not start: {text!r}\n{err.read_text(errors='replace')[-3000:]}")
        host, port = text.rsplit("//", 1)[1].rsplit(":", 1)
        broker.host, broker.port = host, int(port)
        return broker

    return start


@pytest.fixture
def broker_env() -> dict:
    """The environment a `seglog` subprocess of a test runs with (this checkout first)."""
    return _env()


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers for one test (restarts, kills, special settings)."""
    started: list[RunningBroker] = []
    yield _start_factory(tmp_path, started)
    for b in started:
        b.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> RunningBroker:
    """One broker shared by a module's tests (each test uses its own topics)."""
    started: list[RunningBroker] = []
    yield _start_factory(tmp_path_factory.mktemp("broker"), started)()
    for b in started:
        b.stop()
