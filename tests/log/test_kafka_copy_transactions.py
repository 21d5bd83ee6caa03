"""Opening copies of a Kafka log dir whose producer state must be rebuilt from transaction markers.

The copies are laid out as a Kafka broker leaves them: batches from kafka-python's independent
RecordBatch builder (transactional data, idempotent data, plain data, and COMMIT/ABORT control
batches), sparse `.index`/`.timeindex` files, a `.txnindex` in each segment that holds an ABORT
marker (Kafka's 34-byte entries, with the LSO at the marker), the broker's root checkpoints and no
seglog files. There are no `.snapshot` files (or, in one case, one Kafka-format snapshot at a
segment base), so opening must replay every marker, wherever it sits: first in its segment, in
the middle, last, in every segment, aborted and committed, with transactions spanning segments.

Expected reads come from a model of what was written (the status of every record: plain,
committed, aborted, open), never from seglog: read_committed returns the plain and committed
records below the LSO and skips aborted ones; read_uncommitted returns everything below the HW;
the LSO is the first offset of the earliest transaction open (or whose marker is not replicated)
at the HW.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from logcore.log.log_root import LogRoot
from logcore.tools.cli import main

kafka_records = pytest.importorskip("kafka.record.default_records")
kafka_util = pytest.importorskip("kafka.record.util")

TOPIC = "payments"
PID_A, PID_B, PID_C = 4000, 4001, 4002   # A and B transactional, C idempotent
EPOCH = 3
COORDINATOR_EPOCH = 7
TS = 1_700_000_000_000

# A fixed layout: per segment, the batches in file order. ("plain", n) non-idempotent data,
# ("idem", n) idempotent data of C, ("txn", pid, n) transactional data, ("commit"|"abort", pid).
FIXED_LAYOUT = [
    # markers mid-segment (commit, then abort as the last batch)
    [("plain", 3), ("txn", PID_A, 3), ("txn", PID_B, 2), ("commit", PID_A), ("idem", 2),
     ("txn", PID_A, 3), ("abort", PID_B)],
    # an abort first in its segment (A's transaction spans two segments), a commit mid-segment
    [("abort", PID_A), ("txn", PID_B, 2), ("plain", 2), ("commit", PID_B), ("txn", PID_A, 2),
     ("txn", PID_B, 3)],
    # a commit first, an abort second, an abort last
    [("commit", PID_A), ("abort", PID_B), ("txn", PID_A, 2), ("idem", 3), ("txn", PID_B, 2),
     ("abort", PID_A)],
    # the active segment: a commit first, an abort and a commit mid-segment, A left open
    [("commit", PID_B), ("txn", PID_A, 3), ("plain", 2), ("abort", PID_A), ("txn", PID_B, 4),
     ("commit", PID_B), ("txn", PID_A, 2), ("plain", 1)],
]


@dataclass
class Written:
    """What a layout wrote to one partition, and what a reader must get back."""

    segments: list[tuple[int, list[bytes]]] = field(default_factory=list)   # (base, batches)
    aborted_index: dict[int, list[tuple[int, int, int, int]]] = field(default_factory=dict)
    records: list[tuple[int, bytes, str]] = field(default_factory=list)      # offset, value, status
    txn_first: dict[int, int] = field(default_factory=dict)                  # open: pid -> first offset
    markers: list[tuple[int, int, int]] = field(default_factory=list)        # (marker offset, pid, first)
    log_end: int = 0

    def last_stable_offset(self, hw: int) -> int:
        """Kafka's LSO at `hw`: the first offset of the earliest transaction that is open at the
        HW (no marker, or a marker at or above the HW)."""
        unstable = [first for first in self.txn_first.values()]
        unstable += [first for offset, _pid, first in self.markers if offset >= hw]
        return min([hw] + unstable)

    def expected(self, isolation: str, hw: int) -> list[tuple[int, bytes]]:
        if isolation == "read_uncommitted":
            return [(o, v) for o, v, _s in self.records if o < hw]
        lso = self.last_stable_offset(hw)
        return [(o, v) for o, v, s in self.records if o < lso and s != "aborted"]


def data_batch(base_offset: int, values: list[bytes], *, pid: int = -1, seq: int = -1,
               transactional: bool = False) -> bytes:
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional, producer_id=pid,
        producer_epoch=EPOCH if pid >= 0 else -1, base_sequence=seq, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=TS + base_offset + i, key=b"k%d" % (base_offset + i),
                       value=value, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)     # the broker assigns offsets
    struct.pack_into(">i", data, 12, 0)              # and stamps its leader epoch
    return bytes(data)


def marker_batch(offset: int, pid: int, commit: bool) -> bytes:
    """A control batch as Kafka's coordinator writes it: one record, key (version, type), value
    (version, coordinator epoch); kafka-python builds the batch, the control bit is set here."""
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=pid,
        producer_epoch=EPOCH, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=TS + offset, key=struct.pack(">hh", 0, 1 if commit else 0),
                   value=struct.pack(">hi", 0, COORDINATOR_EPOCH), headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, offset)
    struct.pack_into(">i", data, 12, 0)
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x20      # the control bit
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, kafka_util.calc_crc32c(bytes(data[21:])))
    return bytes(data)


def write_layout(layout: list[list[tuple]], partition: int) -> Written:
    out = Written()
    offset = 0
    sequences = {PID_A: 0, PID_B: 0, PID_C: 0}
    for ops in layout:
        base, batches = offset, []
        for op in ops:
            kind = op[0]
            if kind in ("plain", "idem", "txn"):
                n = op[-1]
                values = [b"p%d-o%d" % (partition, offset + i) for i in range(n)]
                if kind == "plain":
                    batches.append(data_batch(offset, values))
                    status = "plain"
                elif kind == "idem":
                    batches.append(data_batch(offset, values, pid=PID_C, seq=sequences[PID_C]))
                    sequences[PID_C] += n
                    status = "plain"
                else:
                    pid = op[1]
                    batches.append(data_batch(offset, values, pid=pid, seq=sequences[pid],
                                              transactional=True))
                    sequences[pid] += n
                    out.txn_first.setdefault(pid, offset)
                    status = f"open:{pid}"
                out.records += [(offset + i, v, status) for i, v in enumerate(values)]
                offset += n
            else:
                pid = op[1]
                first = out.txn_first.pop(pid)
                batches.append(marker_batch(offset, pid, commit=kind == "commit"))
                out.markers.append((offset, pid, first))
                resolved = "committed" if kind == "commit" else "aborted"
                out.records = [(o, v, resolved if s == f"open:{pid}" else s) for o, v, s in out.records]
                if kind == "abort":
                    # Kafka's lastStableOffset(completedTxn): the earliest other open transaction.
                    others = [f for p, f in out.txn_first.items() if p != pid]
                    lso = min(others) if others else offset + 1
                    out.aborted_index.setdefault(base, []).append((pid, first, offset, lso))
                offset += 1
        out.segments.append((base, batches))
    out.log_end = offset
    return out


def random_layout(seed: int) -> list[list[tuple]]:
    """Random interleavings of both transactional producers, idempotent and plain data, cut into
    segments at random batch boundaries (so markers land first, last and in between)."""
    rng = random.Random(seed)
    ops: list[tuple] = []
    open_txns: set[int] = set()
    for _ in range(rng.randint(25, 45)):
        choice = rng.random()
        if choice < 0.15:
            ops.append(("plain", rng.randint(1, 4)))
        elif choice < 0.25:
            ops.append(("idem", rng.randint(1, 4)))
        elif choice < 0.6 or not open_txns:
            pid = rng.choice([PID_A, PID_B])
            ops.append(("txn", pid, rng.randint(1, 4)))
            open_txns.add(pid)
        else:
            pid = rng.choice(sorted(open_txns))
            ops.append((rng.choice(["commit", "abort"]), pid))
            open_txns.discard(pid)
    cuts = sorted(rng.sample(range(1, len(ops)), 3))
    # Always at least one segment that starts with a marker.
    markers = [i for i, op in enumerate(ops) if op[0] in ("commit", "abort") and i > 0]
    if markers and not any(ops[c][0] in ("commit", "abort") for c in cuts):
        cuts = sorted(set(cuts[1:] + [rng.choice(markers)]))
    bounds = [0] + cuts + [len(ops)]
    return [ops[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def write_segment(part: Path, base: int, batches: list[bytes], aborted: list[tuple]) -> None:
    name = f"{base:020d}"
    (part / f"{name}.log").write_bytes(b"".join(batches))
    index, timeindex = bytearray(), bytearray()
    pos = 0
    for i, batch in enumerate(batches):
        last = struct.unpack_from(">q", batch, 0)[0] + struct.unpack_from(">i", batch, 23)[0]
        if i % 3 == 2:
            index += struct.pack(">ii", last - base, pos)
            timeindex += struct.pack(">qi", struct.unpack_from(">q", batch, 35)[0], last - base)
        pos += len(batch)
    (part / f"{name}.index").write_bytes(bytes(index))
    (part / f"{name}.timeindex").write_bytes(bytes(timeindex))
    if aborted:   # Kafka creates a .txnindex on its first entry only
        (part / f"{name}.txnindex").write_bytes(b"".join(
            struct.pack(">hqqqq", 0, pid, first, last, lso) for pid, first, last, lso in aborted))


def kafka_snapshot(entries: list[tuple]) -> bytes:
    """Kafka's producer snapshot (version 1): version, CRC-32C of the rest, entries."""
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, kafka_util.calc_crc32c(body)) + body


def make_copy(root: Path, layouts: list[list[list[tuple]]], *, hw_back: list[int], clean: bool,
              snapshot_segment: int | None = None) -> tuple[list[Written], list[int]]:
    """A Kafka log dir with one partition per layout. The HW of partition p is `hw_back[p]`
    markers before the log end (0: the whole log is replicated)."""
    root.mkdir()
    (root / "meta.properties").write_text("version=1\ncluster.id=abc\nnode.id=1\ndirectory.id=xyz\n")
    written, hws = [], []
    for p, layout in enumerate(layouts):
        part = root / f"{TOPIC}-{p}"
        part.mkdir()
        (part / "partition.metadata").write_text("version: 0\ntopic_id: 0J5SLIDPSwe1oTQoY_hKaQ")
        (part / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
        w = write_layout(layout, p)
        for base, batches in w.segments:
            write_segment(part, base, batches, w.aborted_index.get(base, []))
        if snapshot_segment is not None:
            snap_base = w.segments[snapshot_segment][0]
            state = write_layout(layout[:snapshot_segment], p)   # the state at that segment base
            entries = []
            for pid in (PID_A, PID_B, PID_C):
                # The last data batch of this producer below the base (written the same way).
                last = _last_batch_of(state, pid)
                if last is None:
                    continue
                seq, last_offset, delta = last
                entries.append((pid, EPOCH, seq, last_offset, delta, TS + last_offset,
                                COORDINATOR_EPOCH if pid != PID_C else -1,
                                state.txn_first.get(pid, -1)))
            (part / f"{snap_base:020d}.snapshot").write_bytes(kafka_snapshot(entries))
        if hw_back[p]:
            hw = w.markers[-hw_back[p]][0]
        else:
            hw = w.log_end
        written.append(w)
        hws.append(hw)
    lines = "".join(f"{TOPIC} {p} {hw}\n" for p, hw in enumerate(hws))
    (root / "replication-offset-checkpoint").write_text(f"0\n{len(hws)}\n{lines}")
    recovery = [w.log_end if clean else w.segments[1][0] for w in written]
    (root / "recovery-point-offset-checkpoint").write_text(
        f"0\n{len(hws)}\n" + "".join(f"{TOPIC} {p} {r}\n" for p, r in enumerate(recovery)))
    (root / "log-start-offset-checkpoint").write_text("0\n0\n")
    if clean:
        (root / ".kafka_cleanshutdown").write_text("")
    return written, hws


def _last_batch_of(state: Written, pid: int) -> tuple[int, int, int] | None:
    """(last sequence, last offset, offset delta) of pid's last data batch in `state`."""
    found = None
    for base, batches in state.segments:
        for batch in batches:
            b_pid = struct.unpack_from(">q", batch, 43)[0]
            attributes = struct.unpack_from(">h", batch, 21)[0]
            if b_pid != pid or attributes & 0x20:
                continue
            first = struct.unpack_from(">q", batch, 0)[0]
            delta = struct.unpack_from(">i", batch, 23)[0]
            base_seq = struct.unpack_from(">i", batch, 53)[0]
            found = (base_seq + delta, first + delta, delta)
    return found


def check_library(copy: Path, written: list[Written], hws: list[int]) -> None:
    with LogRoot.open(str(copy)) as root:
        assert root.kafka_copy and root.read_only
        for p, (w, hw) in enumerate(zip(written, hws)):
            log = root.log(TOPIC, p)
            assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, hw, w.log_end)
            assert log.last_stable_offset == w.last_stable_offset(hw)
            for isolation in ("read_committed", "read_uncommitted"):
                got = [(r.offset, r.value) for r in log.read_records(0, isolation=isolation)]
                assert got == w.expected(isolation, hw), (p, isolation)
            # From every offset: a reader starting inside a transaction or at a marker.
            committed = w.expected("read_committed", hw)
            for start in range(0, w.log_end, 5):
                got = [r.offset for r in log.read_records(start)]
                assert got == [o for o, _v in committed if o >= start], (p, start)
            log.close()


def check_cli(copy: Path, written: list[Written], hws: list[int], capsys) -> None:
    for isolation in ("read_committed", "read_uncommitted"):
        code = main(["consume", "--root", str(copy), "--topic", TOPIC, "--from-beginning",
                     "--print-partition", "--print-offset", "--isolation-level", isolation])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        got = sorted(captured.out.splitlines())
        want = sorted(f"Partition:{p}\tOffset:{o}\t{v.decode()}"
                      for p, (w, hw) in enumerate(zip(written, hws)) for o, v in w.expected(isolation, hw))
        assert got == want, isolation
        assert captured.err.strip().endswith(f"Processed a total of {len(want)} messages")


@pytest.mark.parametrize("clean", [True, False], ids=["clean-shutdown", "unclean"])
def test_fixed_layout_markers_first_mid_and_last_in_every_segment(tmp_path, capsys, clean):
    copy = tmp_path / "kafka-logs"
    # Partition 0 fully replicated (A's last transaction open); partition 1's HW sits on its
    # last COMMIT marker, so B's last transaction is still unstable there.
    written, hws = make_copy(copy, [FIXED_LAYOUT, FIXED_LAYOUT], hw_back=[0, 1], clean=clean)
    w = written[0]
    # The layout really has what the test claims: both marker kinds in every segment, markers
    # first and inside segments, a transaction spanning segments, no snapshot.
    for base, batches in w.segments:
        kinds = [struct.unpack_from(">h", b, 21)[0] & 0x20 for b in batches]
        assert any(kinds), base
    assert {m[0] for m in w.markers} & {base for base, _ in w.segments[1:]}
    assert not list(copy.rglob("*.snapshot"))
    assert w.last_stable_offset(hws[0]) < w.log_end and w.last_stable_offset(hws[1]) < hws[1]
    check_library(copy, written, hws)
    check_cli(copy, written, hws, capsys)


@pytest.mark.parametrize("seed", range(6))
def test_random_layouts(tmp_path, capsys, seed):
    layouts = [random_layout(seed * 10 + p) for p in range(2)]
    written, hws = make_copy(tmp_path / "kafka-logs", layouts, hw_back=[0, min(2, seed % 3)],
                             clean=seed % 2 == 0)
    assert sum(len(w.markers) for w in written) > 4
    check_library(tmp_path / "kafka-logs", written, hws)
    check_cli(tmp_path / "kafka-logs", written, hws, capsys)


def test_replay_from_a_kafka_snapshot_at_a_segment_base(tmp_path, capsys):
    """A Kafka snapshot at the base of segment 2 covers segments 0-1: opening replays only the
    markers after it (in segments 2 and 3, first and mid-segment)."""
    copy = tmp_path / "kafka-logs"
    written, hws = make_copy(copy, [FIXED_LAYOUT], hw_back=[0], clean=False, snapshot_segment=2)
    assert len(list(copy.rglob("*.snapshot"))) == 1
    check_library(copy, written, hws)
    check_cli(copy, written, hws, capsys)


def test_a_damaged_marker_is_reported_at_its_file_position(tmp_path, caplog):
    """A marker whose record is damaged (CRC mismatch) in a cleanly shut down copy: opening names
    the segment file and the marker's byte position in it, not a position in a read buffer; a
    reader opens (producer state replayed up to the damage, said once) and its read fails there;
    nothing is cut."""
    from logcore.errors import CorruptRecordError

    copy = tmp_path / "kafka-logs"
    written, _hws = make_copy(copy, [FIXED_LAYOUT], hw_back=[0], clean=True)
    base, batches = written[0].segments[1]
    i = next(i for i, b in enumerate(batches) if struct.unpack_from(">h", b, 21)[0] & 0x20 and i > 0)
    position = sum(len(b) for b in batches[:i])
    path = copy / f"{TOPIC}-0" / f"{base:020d}.log"
    data = bytearray(path.read_bytes())
    data[position + len(batches[i]) - 1] ^= 0xFF        # the marker's coordinator epoch
    path.write_bytes(bytes(data))
    with caplog.at_level("WARNING"), LogRoot.open(str(copy)) as root:
        log = root.log(TOPIC, 0)
        where = f"{base:020d}.log, position {position})"
        assert any(where in r.getMessage() for r in caplog.records), caplog.text
        with pytest.raises(CorruptRecordError) as info:
            list(log.read_records(0, isolation="read_uncommitted"))
    assert info.value.position == position and position > 0
    assert info.value.file.endswith(f"{base:020d}.log")
    assert path.read_bytes() == bytes(data)
