"""`seglog tiered --segment`: the objects one remote segment is stored as; in plain mode they are
the local segment's own files, byte for byte."""
from __future__ import annotations

import time
from pathlib import Path

from logcore.log.log_root import LogRoot
from logcore.maintenance.service import MaintenanceService
from logcore.tools import cli
from tests.tiered.tiered_root import produce, tiering_defaults


def test_segment_objects_are_the_local_files(tmp_path, capsys):
    remote = tmp_path / "remote"
    url = str(tmp_path / "root")
    root = LogRoot.open(url, create=True, defaults=tiering_defaults(str(remote)))
    root.create_topic("t", config={"remote.storage.enable": "true", "segment.bytes": "8192",
                                   "retention.bytes": "-1"})
    log = root.log("t", 0, writer=True)
    produce(log, 20)
    MaintenanceService(root).maintain_log(log, int(time.time() * 1000))
    store = root.remote_tier().store("t", root.describe_topic("t").topic_id, 0)
    store.refresh()
    second = store.list_segments()[1]
    for wanted in (str(second.start_offset + 1), second.segment_id.text):
        # --segment=: a segment id (base64url) may start with "-", which argparse would take for a flag
        assert cli.main(["tiered", "--root", url, "--topic", "t", f"--segment={wanted}"]) == 0
        out = capsys.readouterr().out
        name = f"{second.start_offset:020d}.log"
        assert f"offsets {second.start_offset}-{second.end_offset}" in out and "plain (Kafka files)" in out
        assert f"{name:<40} {second.segment_size_in_bytes:>12} bytes" in out
        assert f"{second.start_offset:020d}.index" in out and f"{second.end_offset + 1:020d}.snapshot" in out
    copied = next(Path(remote).rglob(f"*-{second.segment_id.text}"))
    local = Path(url) / "t-0"
    for suffix in (".log", ".timeindex"):
        name = f"{second.start_offset:020d}{suffix}"
        assert (copied / name).read_bytes() == (local / name).read_bytes()
    assert cli.main(["tiered", "--root", url, "--topic", "t", "--segment", "99999999"]) != 0
    assert "no finished remote segment '99999999'" in capsys.readouterr().err
    root.close()
