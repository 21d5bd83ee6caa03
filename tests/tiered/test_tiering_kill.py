"""kill -9 of a maintenance pass at chosen points of the copy and of the remote deletion, then
readers and a new pass: no duplicate or partial remote segment is ever served, nothing is lost,
and the next pass leaves no debris (no half-done attempt, no unknown remote folder)."""
from __future__ import annotations

import signal
import sys
import textwrap

import pytest

from logcore.log.log_root import LogRoot
from logcore.maintenance.service import MaintenanceService
from logcore.tiered.fsspec_rsm import segment_folder
from logcore.tiered.metadata import RemoteLogSegmentState as S
from logcore.tiered.metadata_store import partition_prefix
from tests.tiered.tiered_root import produce, tiering_defaults
import broker_spawner

CHILD = textwrap.dedent("""
    import os, signal, sys
    from logcore.log.log_root import LogRoot
    from logcore.maintenance.service import MaintenanceService
    from logcore.tiered.metadata import RemoteLogSegmentState as S
    from logcore.tiered.metadata_store import RemoteLogMetadataStore

    url, point, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
    calls = {"n": 0}

    def die_on_nth():
        calls["n"] += 1
        if calls["n"] == nth:
            os.kill(os.getpid(), signal.SIGKILL)

    root = LogRoot.open(url)
    storage = root.remote_tier().rsm.storage
    if point in ("after-add",):
        add = RemoteLogMetadataStore.add_segment
        def add_segment(self, meta):
            result = add(self, meta)
            die_on_nth()
            return result
        RemoteLogMetadataStore.add_segment = add_segment
    elif point in ("before-manifest", "mid-delete"):
        name = "write_atomic" if point == "before-manifest" else "delete_dir"
        inner = getattr(storage, name)
        def wrapped(path, *args, **kwargs):
            if point == "mid-delete" or path.endswith("manifest.json"):
                die_on_nth()
            return inner(path, *args, **kwargs)
        setattr(storage, name, wrapped)
    else:
        state = {"before-finish": S.COPY_SEGMENT_FINISHED, "before-delete-started": S.DELETE_SEGMENT_STARTED,
                 "before-delete-finished": S.DELETE_SEGMENT_FINISHED}[point]
        update = RemoteLogMetadataStore.update_state
        def update_state(self, segment_id, new_state, **kwargs):
            if new_state is state:
                die_on_nth()
            return update(self, segment_id, new_state, **kwargs)
        RemoteLogMetadataStore.update_state = update_state
    MaintenanceService(root).run_once()
    print("pass completed", flush=True)
""")

CONFIG = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "40000",
          "retention.bytes": "-1"}


def run_killed(url: str, point: str, nth: int) -> None:
    proc = broker_spawner.run([sys.executable, "-c", CHILD, url, point, str(nth)], timeout=60)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr[-2000:])


def check_served(url: str, expect_start: int | None = None) -> tuple[int, int]:
    """Every offset from the log start offset to the HW is read once, with its own value."""
    root = LogRoot.open(url, read_only=True)
    try:
        log = root.log("t", 0)
        start, hw = log.log_start_offset, log.high_watermark
        if expect_start is not None:
            assert start == expect_start
        records = list(log.read_records(start))
        assert [r.offset for r in records] == list(range(start, hw))
        assert all(r.value.startswith(b"v%d-" % r.offset) for r in records)
        return start, hw
    finally:
        root.close()


def check_no_debris(root: LogRoot) -> None:
    tier = root.remote_tier()
    store = tier.store("t", root.describe_topic("t").topic_id, 0)
    store.refresh()
    assert not store.list_segments([S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED])
    finished = store.list_segments()
    for a, b in zip(finished, finished[1:]):
        assert b.start_offset == a.end_offset + 1          # contiguous, no overlap, no duplicate
    prefix = partition_prefix(store.topic_id_partition)
    folders = {f"{prefix}/{n}" for n in tier.rsm.segment_folders(prefix)}
    assert folders == {segment_folder(m) for m in finished}


def _tiered_root_of_100_records(tmp_path):
    """(url, open root) of a tiered root whose t-0 holds 100 records, its writer released."""
    url = str(tmp_path / "root")
    root = LogRoot.open(url, create=True, defaults=tiering_defaults(str(tmp_path / "remote")))
    root.create_topic("t", config=CONFIG)
    log = root.log("t", 0, writer=True)
    produce(log, 100)
    root.release_log(log)
    return url, root


@pytest.mark.parametrize("point,nth", [("after-add", 3), ("before-manifest", 2), ("before-finish", 4)])
def test_kill_during_upload(tmp_path, point, nth):
    url, root = _tiered_root_of_100_records(tmp_path)
    root.close()
    run_killed(url, point, nth)
    check_served(url, expect_start=0)                       # readers right after the kill
    root = LogRoot.open(url)
    outcome = MaintenanceService(root).run_once().outcomes[0]
    assert outcome.skipped is None and outcome.tiering.error is None
    assert outcome.tiering.attempts_collected == 1          # the killed attempt, cleaned up
    check_no_debris(root)
    check_served(url, expect_start=0)
    assert root.log("t", 0).local_log_start_offset > 0
    root.close()


@pytest.mark.parametrize("point,nth", [("before-delete-started", 1), ("mid-delete", 2),
                                       ("before-delete-finished", 1)])
def test_kill_during_remote_deletion(tmp_path, point, nth):
    url, root = _tiered_root_of_100_records(tmp_path)
    MaintenanceService(root).run_once()
    _start, hw = check_served(url, expect_start=0)
    root.alter_topic_config("t", {"retention.bytes": "100000"})
    root.close()
    run_killed(url, point, nth)
    start_after_kill, _ = check_served(url)
    assert start_after_kill > 0                               # the log start offset moved first
    root = LogRoot.open(url)
    outcome = MaintenanceService(root).run_once().outcomes[0]
    assert outcome.skipped is None and outcome.tiering.error is None
    check_no_debris(root)
    start, hw_after = check_served(url)
    assert start >= start_after_kill and hw_after == hw
    root.close()
