"""kill -9 of a process in the middle of cleaning passes, at random points, then reopen."""
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import StorageTarget
from logcore.log.log_root import LogRoot
from tests.cleaner.helpers import check_compacted, open_root, read_all, write
import broker_spawner
from broker_process import subprocess_env


CHILD = r"""
import sys
from logcore.log.log_root import LogRoot
from logcore.cleaner.cleaner import LogCleaner
root = LogRoot.open(sys.argv[1])
log = root.log("t", 0, writer=True)
print("ready", flush=True)
cleaner = LogCleaner(dedupe_buffer_size=24 * 64, io_buffer_size=4096)
n = 0
while True:
    for i in range(20):
        log.append_records([(b"k%d" % (i % 13), b"again-%d-%d" % (n, i), (), 9_000_000)])
    log.commit()
    log.roll_to(log.log_end_offset)
    cleaner.clean(log, 2_000_000)
    n += 1
"""


def _files_ok(directory):
    names = os.listdir(directory)
    leftovers = [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert not leftovers, leftovers


@pytest.mark.parametrize("seed", range(6))
def test_kill_during_cleaning_loses_nothing(tmp_path, seed):
    target = StorageTarget("local", str(tmp_path / "root"))
    root = open_root(target, segment_bytes=3000)
    log = root.log("t", 0, writer=True)
    items = [(b"k%d" % (i % 13), None if i % 17 == 3 else b"v%d" % i) for i in range(300)]
    written = write(log, items)
    log.close()
    root.close()
    env = subprocess_env()
    child = broker_spawner.popen([sys.executable, "-c", CHILD, target.url], stdout=subprocess.PIPE, env=env)
    assert child.stdout.readline().strip() == b"ready"
    time.sleep(random.Random(seed).uniform(0.0, 0.6))
    child.send_signal(signal.SIGKILL)
    child.wait()
    root = LogRoot.open(target.url)
    log = root.log("t", 0, writer=True)          # recovery finishes or rolls back any swap
    _files_ok(os.path.join(target.url, "t-0"))
    records = read_all(log)
    # everything committed by the child is there too: take it from the log itself
    later = {o: (k, v) for o, k, v in records if o >= 300}
    check_compacted(records, written | later, tombstones_expected=True)
    offsets = [o for o, *_ in records]
    assert offsets == sorted(set(offsets))
    segs = log.segments
    for a, b in zip(segs, segs[1:]):
        assert a.next_offset() <= b.base_offset, "segments never overlap"
    root.close()
