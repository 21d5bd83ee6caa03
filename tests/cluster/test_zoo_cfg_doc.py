"""The zoo.cfg files docs/cluster.md gives start ZooKeeper as written: a standalone server and a
3-node ensemble on loopback, only the paths, ports and addresses changed to this machine's."""
from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from zookeeper_reference import ZooKeeperUnavailable, find_zookeeper, four_letter, free_ports

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"


def _block(title: str) -> list[str]:
    for block in re.findall(r"```\n(.*?)```", DOC.read_text(), flags=re.S):
        lines = block.splitlines()
        if lines and lines[0].startswith(f"# zoo.cfg: {title}"):
            return [line for line in lines if line and not line.startswith("#")]
    raise AssertionError(f"docs/cluster.md has no zoo.cfg block '{title}'")


def _local(lines: list[str], data_dir: Path, client_port: int, servers: dict[int, tuple[int, int]]) -> str:
    """The doc's lines with this machine's data dir, client port and loopback addresses."""
    out = []
    for line in lines:
        key, _, value = line.partition("=")
        if key == "dataDir":
            value = str(data_dir)
        elif key == "clientPort":
            value = str(client_port)
        elif key == "clientPortAddress":
            value = "127.0.0.1"
        elif key.startswith("server."):
            quorum, election = servers[int(key.split(".")[1])]
            assert re.fullmatch(r"[\d.]+:2888:3888", value), line
            value = f"127.0.0.1:{quorum}:{election}"
        out.append(f"{key}={value}")
    return "\n".join(out) + "\n"


def _start(java: str, cp: str, cfg: Path) -> subprocess.Popen:
    return subprocess.Popen([java, "-Xms16m", "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp,
                             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
                            stdout=open(cfg.with_suffix(".log"), "wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def _modes(ports: list[int], timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        answers = [four_letter(p, "srvr") for p in ports]
        modes = [m.group(1) if (m := re.search(r"Mode: (\w+)", a)) else "" for a in answers]
        if all(modes) or time.monotonic() > deadline:
            return modes
        time.sleep(0.3)


def test_the_documented_zoo_cfg_files_start_zookeeper(tmp_path):
    try:
        java, cp = find_zookeeper()
    except ZooKeeperUnavailable as exc:
        pytest.skip(str(exc))
    procs = []
    try:
        port = free_ports(1)[0]
        cfg = tmp_path / "standalone.cfg"
        cfg.write_text(_local(_block("standalone"), tmp_path / "standalone", port, {}))
        procs.append(_start(java, cp, cfg))
        assert _modes([port]) == ["standalone"], cfg.with_suffix(".log").read_text()[-3000:]
        assert four_letter(port, "ruok") == "imok"

        ports = free_ports(9)
        servers = {n: (ports[3 + 2 * (n - 1)], ports[4 + 2 * (n - 1)]) for n in (1, 2, 3)}
        lines = _block("node 1 of 3")
        for n in (1, 2, 3):
            data = tmp_path / f"node{n}"
            data.mkdir()
            (data / "myid").write_text(f"{n}\n")
            cfg = tmp_path / f"node{n}.cfg"
            cfg.write_text(_local(lines, data, ports[n - 1], servers))
            procs.append(_start(java, cp, cfg))
        modes = _modes(ports[:3])
        assert sorted(modes) == ["follower", "follower", "leader"], modes
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
