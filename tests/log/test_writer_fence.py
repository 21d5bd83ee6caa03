"""Writer fencing by leader epoch, on local disk, fsspec memory and S3."""
from __future__ import annotations

import json
import multiprocessing
import threading

import pytest

from logcore.errors import CorruptIndexError, FencedWriterError, ReadOnlyLogError
from logcore.log.writer_fence import EPOCH_FILE, WriterFence
from logcore.storage import open_storage

PARTITION = "clicks-0"


@pytest.fixture
def storage(any_storage_url):
    return open_storage(any_storage_url.url, any_storage_url.storage_options)


def test_first_acquire_starts_at_zero_and_current_epoch_does_not_bump(storage):
    fence = WriterFence(storage, PARTITION)
    assert fence.current_epoch() == -1
    assert fence.acquire() == 0
    assert fence.partition_leader_epoch == 0
    assert fence.current_epoch() == 0
    assert fence.current_epoch() == 0
    record = json.loads(storage.read(storage.join(PARTITION, EPOCH_FILE)))
    assert record["epoch"] == 0 and record["writer"] == fence.writer_id and record["acquired_ms"] > 0
    fence.check()


def test_second_writer_fences_the_first(storage):
    first, second = WriterFence(storage, PARTITION), WriterFence(storage, PARTITION)
    assert first.acquire() == 0
    assert second.acquire() == 1
    second.check()
    with pytest.raises(FencedWriterError) as info:
        first.check()
    message = str(info.value)
    assert PARTITION in message and "epoch 0" in message and "now 1" in message
    # the fenced writer can take the partition back, fencing the other one
    assert first.acquire() == 2
    first.check()
    with pytest.raises(FencedWriterError, match="epoch 1.*now 2"):
        second.check()


def test_fenced_writer_critical_raises_before_the_body(storage):
    first, second = WriterFence(storage, PARTITION), WriterFence(storage, PARTITION)
    first.acquire()
    ran = []
    with first.critical():
        ran.append("first")
    second.acquire()
    with pytest.raises(FencedWriterError, match=PARTITION):
        with first.critical():
            ran.append("fenced")
    assert ran == ["first"]
    with second.critical():
        ran.append("second")
    assert ran == ["first", "second"]


def test_unacquired_writer_cannot_write(storage):
    fence = WriterFence(storage, PARTITION)
    with pytest.raises(FencedWriterError, match="not acquired"):
        fence.partition_leader_epoch
    with pytest.raises(FencedWriterError, match="not acquired"):
        fence.check()
    with pytest.raises(FencedWriterError, match="not acquired"):
        with fence.critical():
            pass


def test_min_epoch_moves_past_an_existing_leader_epoch(storage):
    fence = WriterFence(storage, PARTITION)
    assert fence.acquire(min_epoch=7) == 7
    assert WriterFence(storage, PARTITION).acquire(min_epoch=3) == 8


def test_racing_acquires_get_distinct_epochs_and_one_winner(storage):
    _race_eight_writers(storage)


def test_racing_acquires_on_each_s3_backend(s3_backend_url):
    _race_eight_writers(open_storage(s3_backend_url.url, s3_backend_url.storage_options))


def _race_eight_writers(storage) -> None:
    fences = [WriterFence(storage, PARTITION) for _ in range(8)]
    barrier = threading.Barrier(len(fences))
    epochs: list[int | None] = [None] * len(fences)
    errors: list[BaseException] = []

    def take(i: int) -> None:
        try:
            barrier.wait()
            epochs[i] = fences[i].acquire()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(fences))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sorted(epochs) == list(range(8))
    current = []
    for fence in fences:
        try:
            fence.check()
            current.append(fence)
        except FencedWriterError:
            pass
    assert len(current) == 1
    assert current[0].partition_leader_epoch == 7 == current[0].current_epoch()


def test_corrupt_epoch_file_names_the_file(storage):
    storage.write_atomic(storage.join(PARTITION, EPOCH_FILE), b"{not json")
    with pytest.raises(CorruptIndexError, match=f"{PARTITION}/{EPOCH_FILE}"):
        WriterFence(storage, PARTITION).acquire()
    storage.write_atomic(storage.join(PARTITION, EPOCH_FILE), b'{"epoch": -4, "writer": "x"}')
    with pytest.raises(CorruptIndexError, match="bad writer epoch"):
        WriterFence(storage, PARTITION).current_epoch()


def test_read_only_storage_cannot_take_a_partition(storage, any_storage_url):
    WriterFence(storage, PARTITION).acquire()
    ro = open_storage(any_storage_url.url, any_storage_url.storage_options, read_only=True)
    reader = WriterFence(ro, PARTITION)
    assert reader.current_epoch() == 0
    with pytest.raises(ReadOnlyLogError):
        reader.acquire()


def test_takeover_waits_for_a_local_critical_section(tmp_path):
    storage = open_storage(str(tmp_path))
    holder, taker = WriterFence(storage, PARTITION), WriterFence(storage, PARTITION)
    holder.acquire()
    took = threading.Event()

    def take_over() -> None:
        taker.acquire()
        took.set()

    with holder.critical():
        thread = threading.Thread(target=take_over)
        thread.start()
        assert not took.wait(0.3)  # blocked on .writer.lock while the holder is writing
        holder.check()
    assert took.wait(10)
    thread.join(10)
    with pytest.raises(FencedWriterError):
        with holder.critical():
            pass


def _acquire_in_child(root: str, result) -> None:
    result.put(WriterFence(open_storage(root), PARTITION).acquire())


def test_writer_in_another_process_fences_this_one(tmp_path):
    storage = open_storage(str(tmp_path))
    fence = WriterFence(storage, PARTITION)
    assert fence.acquire() == 0
    fence.check()
    ctx = multiprocessing.get_context("spawn")
    result = ctx.Queue()
    child = ctx.Process(target=_acquire_in_child, args=(str(tmp_path), result))
    child.start()
    assert result.get(timeout=30) == 1
    child.join(30)
    with pytest.raises(FencedWriterError, match="epoch 0.*now 1"):
        fence.check()


def test_local_check_notices_takeover_within_one_mtime_tick(tmp_path):
    # Takeovers in quick succession (same coarse mtime, same size, freed inodes reused) must
    # still be seen: the fence pins its own inode, so the path cannot look unchanged.
    storage = open_storage(str(tmp_path))
    mine = WriterFence(storage, PARTITION)
    mine.acquire()
    for _ in range(30):
        WriterFence(storage, PARTITION).acquire()
        with pytest.raises(FencedWriterError):
            mine.check()
        mine.acquire()
        mine.check()


# -- resuming an epoch ----------------------------------------------------------------------------

def _hold_and_release(storage) -> tuple[int, str]:
    fence = WriterFence(storage, PARTITION)
    epoch = fence.acquire()
    fence.check()
    fence.release()
    return epoch, fence.writer_id


def test_released_writer_resumes_its_epoch_without_a_bump(storage):
    token = _hold_and_release(storage)
    for _ in range(3):
        fence = WriterFence(storage, PARTITION)
        assert fence.acquire(resume=token) == token[0]
        assert fence.resumed and fence.writer_id == token[1]
        assert fence.current_epoch() == token[0]
        fence.check()
        with fence.critical():
            pass
        fence.release()
    # a takeover after a resume is seen, as after a bump
    fence = WriterFence(storage, PARTITION)
    fence.acquire(resume=token)
    assert fence.resumed
    taker = WriterFence(storage, PARTITION)
    assert taker.acquire() == token[0] + 1
    with pytest.raises(FencedWriterError, match=f"epoch {token[0]}.*now {token[0] + 1}"):
        fence.check()
    with pytest.raises(FencedWriterError):
        with fence.critical():
            pass
    taker.check()


def test_resume_after_another_writer_took_the_partition_bumps_and_fences_it(storage):
    token = _hold_and_release(storage)
    other = WriterFence(storage, PARTITION)
    assert other.acquire() == token[0] + 1
    other.release()
    zombie = WriterFence(storage, PARTITION)
    assert zombie.acquire(resume=token) == token[0] + 2      # not the old epoch: a takeover
    assert not zombie.resumed and zombie.writer_id != token[1]
    # the other writer's own token no longer matches either: it bumps too
    again = WriterFence(storage, PARTITION)
    assert again.acquire(resume=(other.partition_leader_epoch, other.writer_id)) == token[0] + 3
    assert not again.resumed
    with pytest.raises(FencedWriterError):
        zombie.check()


def test_resume_while_the_holder_still_holds_it_bumps(storage):
    holder = WriterFence(storage, PARTITION)
    epoch = holder.acquire()
    # the same identity cannot be taken over silently while its holder is live: a bump fences it
    second = WriterFence(storage, PARTITION)
    assert second.acquire(resume=(epoch, holder.writer_id)) == epoch + 1
    assert not second.resumed
    with pytest.raises(FencedWriterError):
        holder.check()


def test_racing_resumers_one_resumes_and_the_others_bump(storage):
    token = _hold_and_release(storage)
    fences = [WriterFence(storage, PARTITION) for _ in range(4)]
    barrier = threading.Barrier(len(fences))
    errors: list[BaseException] = []

    def take(fence: WriterFence) -> None:
        try:
            barrier.wait()
            fence.acquire(resume=token)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=take, args=(f,)) for f in fences]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    epochs = sorted(f.partition_leader_epoch for f in fences)
    assert len(set(epochs)) == len(fences)          # never two holders of one epoch
    assert sum(f.resumed for f in fences) <= 1
    live = []
    for fence in fences:
        try:
            fence.check()
            live.append(fence)
        except FencedWriterError:
            pass
    assert len(live) == 1 and live[0].partition_leader_epoch == epochs[-1]


def test_resume_below_min_epoch_bumps(storage):
    token = _hold_and_release(storage)
    fence = WriterFence(storage, PARTITION)
    assert fence.acquire(min_epoch=5, resume=token) == 5
    assert not fence.resumed


def test_object_store_resume_needs_a_released_record(tmp_path):
    storage = open_storage("memory://" + tmp_path.name + "-resume")
    crashed = WriterFence(storage, PARTITION)
    epoch = crashed.acquire()
    crashed.close()                      # stopped without release: the record still says held
    fence = WriterFence(storage, PARTITION)
    assert fence.acquire(resume=(epoch, crashed.writer_id)) == epoch + 1
    assert not fence.resumed
    fence.release()
    record = json.loads(storage.read(storage.join(PARTITION, EPOCH_FILE)))
    assert record["released"] is True
    again = WriterFence(storage, PARTITION)
    assert again.acquire(resume=(epoch + 1, fence.writer_id)) == epoch + 1 and again.resumed
    record = json.loads(storage.read(storage.join(PARTITION, EPOCH_FILE)))
    assert "released" not in record and record["writer"] == fence.writer_id


def test_local_resume_after_the_holder_died_keeps_the_epoch(tmp_path):
    storage = open_storage(str(tmp_path))
    crashed = WriterFence(storage, PARTITION)
    epoch = crashed.acquire()
    crashed.close()                      # as a dead process: its flocks are gone
    fence = WriterFence(storage, PARTITION)
    assert fence.acquire(resume=(epoch, crashed.writer_id)) == epoch and fence.resumed
    fence.check()
