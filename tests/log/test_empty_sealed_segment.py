"""An empty sealed segment (Kafka's cleaner leaves one when it compacts every record of a segment
away) is skipped by readers; it is not mistaken for a segment retention deleted under them."""
from __future__ import annotations

import io
import sys

from logcore.tools.cli import main


def test_reader_skips_an_empty_sealed_segment(tmp_path, capsys, monkeypatch):
    root = str(tmp_path / "root")
    assert main(["topics", "--root", root, "--create", "e", "--partitions", "1",
                 "--config", "segment.bytes=1024"]) == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"".join(b"v%d\n" % i for i in range(100)))))
    assert main(["produce", "--root", root, "--topic", "e", "--batch-size", "5"]) == 0
    part = tmp_path / "root" / "e-0"
    bases = sorted(int(p.stem) for p in part.glob("*.log"))
    assert len(bases) >= 3 and bases[0] == 0
    for suffix in (".log", ".index", ".timeindex"):          # as Kafka's cleaner leaves it: files kept, empty
        (part / f"{0:020d}{suffix}").write_bytes(b"")
    capsys.readouterr()
    assert main(["consume", "--root", root, "--topic", "e", "--from-beginning", "--print-offset"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"Offset:{o}\tv{o}" for o in range(bases[1], 100)]
