"""Planning and reading a root that no broker serves never imports the Kafka protocol client:
importing it (and the schema types it brings, which register with hypothesis when that is
installed) took over a second in every streaming query's planning process (bench_spark_s3.py's
profile). Checked in a fresh interpreter, since this test session imports it anyway."""
from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import sys
from logcore.log.log_root import LogRoot
from pyspark_seglog.partition_reader import read_partition
from pyspark_seglog.source import SeglogStreamReader

root = sys.argv[1]
r = LogRoot.open(root, create=True)
r.create_topic("t", 2)
log = r.log("t", 0, writer=True)
log.append_records([(b"k", b"v", (), None)] * 3)
log.commit()
log.close()
r.close()
reader = SeglogStreamReader({"path": root, "subscribe": "t", "startingoffsets": "earliest"}, None)
reader.prepareForTriggerAvailableNow()
start = reader.initialOffset()
end = reader.latestOffset(start, reader.getDefaultReadLimit())
rows = sum(b.num_rows for p in reader.partitions(start, end) for b in read_partition(p))
loaded = sorted(m for m in sys.modules if m == "kio" or m.startswith(("kio.", "logcore.wire.client")))
print(rows, ",".join(loaded))
"""


def test_a_root_no_broker_serves_is_planned_and_read_without_the_protocol_client(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "root")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows, _, loaded = done.stdout.strip().partition(" ")
    assert rows == "3"
    assert loaded == "", f"imported while planning and reading: {loaded}"
