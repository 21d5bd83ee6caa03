"""kill -9 of a process that appends and applies retention, at random points; reopen and check
that the log start offset agrees with the files and that nothing at or above it was lost."""
from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from logcore.log.log_root import LogRoot
import broker_spawner

CHILD = textwrap.dedent("""
    import sys
    from logcore.log.log_root import LogRoot
    root = LogRoot.open(sys.argv[1])
    log = root.log("t", 0, writer=True)
    while True:
        n = log.log_end_offset
        log.append_records([(b"k", b"v%d" % (n + i), (), 1) for i in range(5)])
        log.commit()
        print("hw", log.high_watermark, flush=True)
        result = log.apply_retention()
        log.delete_expired_files()
        print("start", result.log_start_offset, flush=True)
""")


@pytest.mark.parametrize("seed,delay", [(0, "0"), (1, "0"), (2, "30"), (3, "30")])
def test_kill_minus_nine_while_applying_retention(tmp_path, seed, delay):
    url = str(tmp_path / "root")
    LogRoot.open(url, create=True).create_topic("t", config={
        "segment.bytes": "300", "retention.bytes": "1200", "retention.ms": "-1",
        "file.delete.delay.ms": delay})
    rng = random.Random(seed)
    acked_hw = acked_start = 0
    for _round in range(4):
        proc = broker_spawner.popen([sys.executable, "-c", CHILD, url], stdout=subprocess.PIPE, text=True)
        run_for = rng.uniform(0.2, 0.9)
        deadline = None                  # counted from the child's first commit, not its start-up
        while deadline is None or time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if deadline is None:
                deadline = time.time() + run_for
            what, value = line.split()
            if what == "hw":
                acked_hw = max(acked_hw, int(value))
            else:
                acked_start = max(acked_start, int(value))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        root = LogRoot.open(url)
        reader = root.log("t", 0)
        # The checkpoint moves before any file goes: never behind what a pass reported.
        assert reader.log_start_offset >= acked_start
        assert reader.high_watermark >= acked_hw
        first = reader.segments[0].base_offset
        assert first <= reader.log_start_offset
        assert len(reader.segments) == 1 or reader.segments[1].base_offset > reader.log_start_offset
        got = [(r.offset, r.value) for r in reader.read_records(reader.log_start_offset)]
        expect = list(range(reader.log_start_offset, reader.high_watermark))
        assert [o for o, _ in got] == expect
        assert all(v == b"v%d" % o for o, v in got)
        root.release_log(reader)
        writer = root.log("t", 0, writer=True)
        # A writer's open deletes what lies wholly below the log start offset, and leftovers.
        names = root.storage.list_dir("t-0")
        assert not any(n.endswith(".deleted") for n in names)
        bases = sorted(int(n[:20]) for n in names if n.endswith(".log"))
        assert bases[0] <= writer.log_start_offset
        assert len(bases) == 1 or bases[1] > writer.log_start_offset
        root.release_log(writer)
        root.close()
    assert acked_start > 0          # retention really ran while the process was being killed
