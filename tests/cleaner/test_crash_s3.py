"""kill -9 of a process running cleaning passes against a real S3 server, at random points.

Each round restarts the child on the same root; after each kill a writer reopens the partition:
the log must be the old or the new one (every record written is there or superseded, the final
value of every key is there, segments never overlap), and the opening writer must have removed
what the killed pass left (objects of no listed segment).
"""
import json
import random
import signal
import subprocess
import sys
import time

import pytest

from logcore.log.log_root import LogRoot
from logcore.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from tests.cleaner.helpers import check_compacted, open_root, read_all, write
import broker_spawner
from broker_process import subprocess_env

ROUNDS = 4

CHILD = r"""
import json, sys
from logcore.log.log_root import LogRoot
from logcore.cleaner.cleaner import LogCleaner
root = LogRoot.open(sys.argv[1], storage_options=json.loads(sys.argv[2]))
log = root.log("t", 0, writer=True)
print("ready", flush=True)
cleaner = LogCleaner(dedupe_buffer_size=24 * 64, io_buffer_size=4096)
n = int(sys.argv[3])
while True:
    for i in range(12):
        key = b"k%d" % (i % 13)
        log.append_records([(key, None if (n + i) % 9 == 4 else b"r%d-%d" % (n, i), (), 9_000_000)])
        if i % 4 == 3:
            log.commit()          # on S3 every commit publishes a small segment object
    log.commit()
    cleaner.clean(log, 2_000_000)
    n += 1
"""

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _check(target, written):
    root = LogRoot.open(target.url, storage_options=target.storage_options)
    log = root.log("t", 0, writer=True)        # takes over; removes what a killed pass left
    records = read_all(log)
    later = {o: (k, v) for o, k, v in records if o not in written}
    check_compacted(records, written | later, tombstones_expected=True)
    segs = log.segments
    for a, b in zip(segs, segs[1:]):
        assert a.next_offset() <= b.base_offset, "segments never overlap"
    stems = {s.stem for s in segs}
    stray = [n for n in log.storage.list_dir(log.dir)
             if n.endswith(SEGMENT_SUFFIXES) and n.rsplit(".", 1)[0] not in stems]
    assert not stray, f"objects of no listed segment left after a writer opened the log: {stray}"
    root.close()
    return {o: (k, v) for o, k, v in records}


@pytest.mark.s3
def test_kill_during_cleaning_on_s3_loses_nothing(storage_targets):
    target = storage_targets.make("s3")
    root = open_root(target, segment_bytes=3000, file_delete_delay_ms=0)
    log = root.log("t", 0, writer=True)
    items = [(b"k%d" % (i % 13), None if i % 17 == 3 else b"v%d" % i) for i in range(120)]
    written = write(log, items, per_commit=10)
    root.close()
    env = subprocess_env()
    rnd = random.Random(13)
    # Every record any round committed: a record may later be superseded, never lost unless so.
    history = dict(written)
    for round_ in range(ROUNDS):
        child = broker_spawner.popen([sys.executable, "-c", CHILD, target.url, json.dumps(target.storage_options),
                                      str(1000 * round_)], stdout=subprocess.PIPE, env=env)
        try:
            assert child.stdout.readline().strip() == b"ready"
            time.sleep(rnd.uniform(0.3, 2.5))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
        seen = _check(target, history)
        history |= seen
    assert len(history) > len(written), "the child wrote and cleaned between kills"
