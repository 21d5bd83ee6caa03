"""`event.loop`: the broker process runs on uvloop (the default) or asyncio's own loop, and
serves the same on both; another value is refused, naming the setting."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from broker_helpers import create, produce  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from logcore.broker.config import BrokerConfig  # noqa: E402
from logcore.errors import InvalidConfigError  # noqa: E402


def _uvloop_loaded(pid: int) -> bool:
    """Whether uvloop's compiled loop is mapped into the process."""
    return any("uvloop" in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


@pytest.mark.parametrize("loop", ["uvloop", "asyncio", None])
def test_each_loop_serves_produce_and_large_fetches(broker_factory, loop):
    if loop != "asyncio":
        pytest.importorskip("uvloop")
    b = broker_factory(**({"event.loop": loop} if loop else {}))
    assert _uvloop_loaded(b.proc.pid) == (loop != "asyncio")
    create(b, "t")
    # values near 1 MiB: a consumer's fetch is a file range larger than a socket takes at once, so on
    # uvloop (no loop.sendfile) its rest is read and written
    values = [os.urandom(900_000) for _ in range(12)]
    produce(b, "t", values)
    # a small receive buffer: the socket takes a fetch's range only part by part
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "socket.receive.buffer.bytes": 4096,
                  "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 8 << 20})
    c.assign([TopicPartition("t", 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            got.append(m.value())
    c.close()
    assert got == values


def test_an_unknown_loop_is_refused():
    with pytest.raises(InvalidConfigError, match="event.loop"):
        BrokerConfig.from_props({"event.loop": "trio"})
