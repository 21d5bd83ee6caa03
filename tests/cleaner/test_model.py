"""Model-based: any sequence of appends, tombstones, commits and cleaning passes leaves a log
whose reader sees the last value of every key (a dict), in write order, at the written offsets."""
import tempfile

from hypothesis import given, settings, strategies as st

from tests.conftest import StorageTarget
from logcore.cleaner.cleaner import LogCleaner
from tests.cleaner.helpers import DAY, open_root, read_all

op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 7), st.binary(min_size=0, max_size=30)),
    st.tuples(st.just("delete"), st.integers(0, 7), st.none()),
    st.tuples(st.just("clean"), st.integers(0, 2), st.none()),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(op, min_size=1, max_size=80), st.sampled_from(["local", "memory"]))
def test_cleaned_log_matches_a_dict(ops, kind):
    with tempfile.TemporaryDirectory() as tmp:
        target = StorageTarget(kind, f"{tmp}/root" if kind == "local" else f"memory://model-{id(ops)}-{tmp[-8:]}")
        root = open_root(target, segment_bytes=300)
        log = root.log("t", 0, writer=True)
        cleaner = LogCleaner(dedupe_buffer_size=24 * 6, io_buffer_size=128)
        model, written, now = {}, {}, 1_000_000
        for kind_, key, value in ops:
            if kind_ == "clean":
                log.commit()
                # key 0..2 here: how much time passes (tombstones may expire)
                now += (0, 1000, DAY + 1)[key]
                cleaner.clean(log, now)
                continue
            k = b"key-%d" % key
            info = log.append_records([(k, value, (), now)])
            written[info.first_offset] = (k, value)
            model[k] = (info.first_offset, value)
        log.commit()
        records = read_all(log)
        offsets = [o for o, *_ in records]
        assert offsets == sorted(set(offsets))
        for o, k, v in records:
            assert written[o] == (k, v)
        seen = {k: o for o, k, _v in records}
        for k, (offset, value) in model.items():
            if value is not None:
                assert seen.get(k) == offset, (k, offset)
            else:
                assert seen.get(k) in (None, offset)     # a tombstone, or nothing once it expired
        root.close()
        if kind == "memory":
            import fsspec
            fsspec.filesystem("memory").rm(target.url, recursive=True)
