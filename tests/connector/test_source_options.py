"""The source's options, offsets JSON and range arithmetic, without Spark (fast)."""
from __future__ import annotations

import json

import pytest

from logcore.errors import InvalidConfigError
from pyspark_seglog.offsets import (OffsetRange, from_spark, offsets_json, parse_assign,
                                    parse_partition_map, prorate, split_ranges, to_spark)
from pyspark_seglog.source_options import (DEFAULT_MAX_TRIGGER_DELAY_MS, parse_bool,
                                           parse_duration_ms, parse_source_options)


def opts(**kw):
    base = {"path": "/data/root", "subscribe": "t"}
    base.update(kw)
    return {k.lower(): v for k, v in base.items() if v is not None}


def stream(**kw):
    return parse_source_options(opts(**kw), streaming=True)


def batch(**kw):
    return parse_source_options(opts(**kw), streaming=False)


def error(streaming=True, **kw) -> str:
    with pytest.raises(InvalidConfigError) as info:
        parse_source_options(opts(**kw), streaming=streaming)
    return str(info.value)


# ----------------------------------------------------------------------------- defaults

def test_defaults_stream_and_batch():
    s = stream()
    assert s.root == "/data/root" and s.strategy == "subscribe" and s.topics == ("t",)
    assert s.starting.kind == "latest" and s.ending.kind == "latest"
    assert s.fail_on_data_loss is True and s.include_headers is False
    assert s.isolation == "read_committed"
    assert s.max_offsets_per_trigger is None and s.min_partitions is None
    assert s.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 900_000
    b = batch()
    assert b.starting.kind == "earliest" and b.ending.kind == "latest"


def test_storage_options_and_ignored_kafka_options():
    s = stream(**{"storage.endpoint_url": "http://127.0.0.1:9000", "storage.client_kwargs.region_name": "eu",
                  "kafka.bootstrap.servers": "host:9092", "kafka.security.protocol": "PLAINTEXT",
                  "groupIdPrefix": "x", "kafkaConsumer.pollTimeoutMs": "1000"})
    assert s.storage_options == {"endpoint_url": "http://127.0.0.1:9000",
                                 "client_kwargs": {"region_name": "eu"}}
    assert s.bootstrap_servers == "host:9092"      # used to ask the broker for latest offsets
    assert stream().bootstrap_servers is None


def test_fetch_bytes_option_bounds_the_task_read_window():
    assert stream().fetch_bytes == 8 << 20
    s = stream(**{"kafka.max.partition.fetch.bytes": "1048576", "minPartitions": "8"})
    assert s.fetch_bytes == 1 << 20
    assert "kafka.max.partition.fetch.bytes='0'" in error(**{"kafka.max.partition.fetch.bytes": "0"})
    assert "integer" in error(**{"kafka.max.partition.fetch.bytes": "1MB"})


# ----------------------------------------------------------------------------- subscription

def test_subscription_strategies():
    assert stream(subscribe=" a, b ,c").topics == ("a", "b", "c")
    p = stream(subscribe=None, subscribePattern="clicks-.*")
    assert p.strategy == "subscribepattern" and p.matches("clicks-eu") and not p.matches("xclicks-eu")
    a = stream(subscribe=None, assign='{"t": [1, 0], "u": [2]}')
    assert a.assigned == (("t", 0), ("t", 1), ("u", 2))


@pytest.mark.parametrize("kw, words", [
    ({"subscribe": None}, ["subscribe", "subscribePattern", "assign"]),
    ({"assign": '{"t":[0]}'}, ["exactly one", "subscribe", "assign"]),
    ({"subscribe": " , "}, ["subscribe"]),
    ({"subscribe": None, "subscribePattern": "a(b"}, ["subscribePattern", "a(b"]),
    ({"subscribe": None, "assign": "[1,2]"}, ["assign", "[1,2]"]),
    ({"subscribe": None, "assign": '{"t": ["x"]}'}, ["assign", "'x'"]),
    ({"subscribe": None, "assign": '{"t": [-1]}'}, ["assign", "-1"]),
    ({"subscribe": None, "assign": "{nope"}, ["assign", "not valid JSON"]),
])
def test_bad_subscription(kw, words):
    message = error(**kw)
    for w in words:
        assert w in message


# ----------------------------------------------------------------------------- offsets options

def test_starting_offsets_forms():
    assert stream(startingOffsets="EARLIEST").starting.kind == "earliest"
    spec = stream(startingOffsets='{"t": {"0": 23, "1": -2}, "u": {"0": -1}}').starting
    assert spec.kind == "offsets" and spec.offsets == {("t", 0): 23, ("t", 1): -2, ("u", 0): -1}
    assert stream(startingTimestamp="1000").starting.timestamp == 1000
    by = stream(startingOffsetsByTimestamp='{"t": {"0": 5}}').starting
    assert by.kind == "timestamps" and by.offsets == {("t", 0): 5}
    # Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets
    both = stream(startingTimestamp="7", startingOffsetsByTimestamp='{"t": {"0": 5}}',
                  startingOffsets="earliest")
    assert both.starting.kind == "timestamp" and both.starting.timestamp == 7


def test_ending_offsets_batch_only():
    b = batch(endingOffsets='{"t": {"0": 10}}')
    assert b.ending.offsets == {("t", 0): 10}
    assert batch(endingTimestamp="99").ending.timestamp == 99
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        value = "latest" if name == "endingOffsets" else ("5" if name == "endingTimestamp" else '{"t":{"0":1}}')
        message = error(**{name: value})
        assert name in message and "batch" in message


@pytest.mark.parametrize("streaming, kw, words", [
    (False, {"startingOffsets": "latest"}, ["startingOffsets", "latest"]),
    (False, {"startingOffsets": '{"t": {"0": -1}}'}, ["startingOffsets", "-1"]),
    (False, {"endingOffsets": "earliest"}, ["endingOffsets", "earliest"]),
    (False, {"endingOffsets": '{"t": {"0": -2}}'}, ["endingOffsets", "-2"]),
    (True, {"startingOffsets": "newest"}, ["startingOffsets", "newest"]),
    (True, {"startingOffsets": '{"t": {"0": -3}}'}, ["startingOffsets", "-3"]),
    (True, {"startingOffsets": '{"t": {"x": 1}}'}, ["startingOffsets", "'x'"]),
    (True, {"startingOffsets": '{"t": {"0": "5"}}'}, ["startingOffsets", "'5'"]),
    (True, {"startingOffsets": '{"t": [0]}'}, ["startingOffsets"]),
    (True, {"startingTimestamp": "yesterday"}, ["startingTimestamp", "yesterday"]),
    (True, {"startingTimestamp": "-5"}, ["startingTimestamp", "-5"]),
    (True, {"startingOffsetsByTimestamp": '{"t": {"0": -1}}'}, ["startingOffsetsByTimestamp", "-1"]),
    (True, {"startingOffsetsByTimestampStrategy": "nearest"}, ["startingOffsetsByTimestampStrategy", "nearest"]),
    (True, {"subscribe": None, "assign": '{"t": [0]}', "startingOffsets": '{"t": {"1": 5}}'},
     ["startingOffsets", "t-1", "assign"]),
])
def test_bad_offsets_options(streaming, kw, words):
    message = error(streaming=streaming, **kw)
    for w in words:
        assert w in message, message


# ----------------------------------------------------------------------------- limits and flags

def test_limits_and_flags():
    s = stream(maxOffsetsPerTrigger="1000", minOffsetsPerTrigger="10", maxTriggerDelay="30s",
               minPartitions="4", maxRecordsPerPartition="500", failOnDataLoss="FALSE",
               includeHeaders="true", **{"isolation.level": "read_uncommitted"})
    assert (s.max_offsets_per_trigger, s.min_offsets_per_trigger, s.max_trigger_delay_ms) == (1000, 10, 30_000)
    assert (s.min_partitions, s.max_records_per_partition) == (4, 500)
    assert s.fail_on_data_loss is False and s.include_headers is True
    assert s.isolation == "read_uncommitted"
    assert stream(**{"kafka.isolation.level": "read_uncommitted"}).isolation == "read_uncommitted"


@pytest.mark.parametrize("kw, words", [
    ({"maxOffsetsPerTrigger": "0"}, ["maxOffsetsPerTrigger", "'0'"]),
    ({"maxOffsetsPerTrigger": "lots"}, ["maxOffsetsPerTrigger", "lots"]),
    ({"minOffsetsPerTrigger": "-3"}, ["minOffsetsPerTrigger", "-3"]),
    ({"minOffsetsPerTrigger": "100", "maxOffsetsPerTrigger": "10"}, ["minOffsetsPerTrigger", "maxOffsetsPerTrigger"]),
    ({"maxTriggerDelay": "soon"}, ["maxTriggerDelay", "soon"]),
    ({"minPartitions": "0"}, ["minPartitions"]),
    ({"maxRecordsPerPartition": "1.5"}, ["maxRecordsPerPartition", "1.5"]),
    ({"failOnDataLoss": "yes"}, ["failOnDataLoss", "yes"]),
    ({"includeHeaders": "1"}, ["includeHeaders"]),
    ({"isolation.level": "serializable"}, ["isolation.level", "serializable"]),
    ({"isolation.level": "read_committed", "kafka.isolation.level": "read_uncommitted"},
     ["isolation.level", "kafka.isolation.level"]),
    ({"path": None}, ["path"]),
])
def test_bad_values(kw, words):
    message = error(**kw)
    for w in words:
        assert w in message, message


def test_durations():
    assert parse_duration_ms("15m") == 900_000
    assert parse_duration_ms("30s") == 30_000
    assert parse_duration_ms("500ms") == 500
    assert parse_duration_ms("2h") == 7_200_000
    assert parse_duration_ms("1d") == 86_400_000
    assert parse_duration_ms("250") == 250


def test_parse_bool():
    assert parse_bool({"includeheaders": "TRUE"}, "includeheaders", False) is True
    assert parse_bool({}, "includeheaders", True) is True
    with pytest.raises(InvalidConfigError, match="includeHeaders"):
        parse_bool({"includeheaders": "on"}, "includeheaders", False)


# ----------------------------------------------------------------------------- option names

@pytest.mark.parametrize("name, suggestion", [
    ("startingOffset", "startingOffsets"),
    ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
    ("subscribepatern", "subscribePattern"),
    ("failOnDataLos", "failOnDataLoss"),
])
def test_unknown_option_suggests_the_closest(name, suggestion):
    message = error(**{name: "x"})
    assert name.lower() in message and f"did you mean {suggestion}" in message


@pytest.mark.parametrize("setting", ["auto.offset.reset", "key.deserializer", "value.deserializer",
                                     "enable.auto.commit", "interceptor.classes"])
def test_rejected_kafka_options(setting):
    message = error(**{f"kafka.{setting}": "x"})
    assert f"kafka.{setting}" in message and "not supported" in message


# ----------------------------------------------------------------------------- offsets JSON

def test_offsets_json_shape():
    offsets = {("t", 10): 5, ("t", 2): 23, ("u", 0): 0}
    spark = to_spark(offsets)
    assert spark == {"t": {"2": 23, "10": 5}, "u": {"0": 0}}
    assert all(isinstance(k, str) for parts in spark.values() for k in parts)
    assert from_spark(spark) == offsets
    assert from_spark(json.loads(offsets_json(offsets))) == offsets
    assert from_spark('{"t": {"0": 3}}') == {("t", 0): 3}
    assert from_spark(None) == {} and to_spark({}) == {}


def test_parse_helpers():
    assert parse_assign('{"b": [1], "a": [0, 0]}') == [("a", 0), ("b", 1)]
    assert parse_partition_map('{"t": {"3": 7}}', "x", minimum=0, what="w") == {("t", 3): 7}


# ----------------------------------------------------------------------------- rate limit

def test_prorate_by_backlog():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 300, ("t", 1): 100, ("t", 2): 100}
    end = prorate(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 25, ("t", 2): 100}


def test_prorate_rounds_small_shares_up_and_never_passes_latest():
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 10_000, ("t", 1): 1}
    end = prorate(start, latest, 10)
    # t-1's share is 10 * 1/10001 < 1: rounded up, so it is not starved; t-0 gets floor(9.999)
    assert end == {("t", 0): 9, ("t", 1): 1}
    assert prorate(start, latest, 1_000_000) == latest
    assert prorate({("t", 0): 5}, {("t", 0): 5}, 10) == {("t", 0): 5}


# ----------------------------------------------------------------------------- range splitting

def r(p, a, b):
    return OffsetRange("t", p, a, b)


def test_split_keeps_ranges_without_options_and_drops_empty_ones():
    ranges = [r(0, 0, 10), r(1, 5, 5), r(2, 0, 1)]
    assert split_ranges(ranges) == [r(0, 0, 10), r(2, 0, 1)]
    assert split_ranges(ranges, min_partitions=2) == [r(0, 0, 10), r(2, 0, 1)]


def test_split_min_partitions_splits_large_ranges_only():
    ranges = [r(0, 0, 100), r(1, 0, 10)]
    out = split_ranges(ranges, min_partitions=4)
    # ideal size 110/4 = 27.5: 100 -> round(3.64) = 4 pieces, 10 -> round(0.36) -> 1 piece
    assert out == [r(0, 0, 25), r(0, 25, 50), r(0, 50, 75), r(0, 75, 100), r(1, 0, 10)]


def test_split_remainder_goes_to_the_last_pieces():
    out = split_ranges([r(0, 0, 10)], min_partitions=3)
    assert out == [r(0, 0, 3), r(0, 3, 6), r(0, 6, 10)]
    assert sum(x.size for x in out) == 10


def test_split_max_records_per_partition():
    out = split_ranges([r(0, 0, 25), r(1, 0, 10)], max_records_per_partition=10)
    assert out == [r(0, 0, 8), r(0, 8, 16), r(0, 16, 25), r(1, 0, 10)]
    both = split_ranges([r(0, 0, 20)], max_records_per_partition=10, min_partitions=4)
    assert [x.size for x in both] == [5, 5, 5, 5]


def test_path_lists_several_log_dirs():
    assert batch().roots == ("/data/root",)
    assert batch(path="/mnt/b1/logs, /mnt/b2/logs,/mnt/b3/logs").roots == (
        "/mnt/b1/logs", "/mnt/b2/logs", "/mnt/b3/logs")
    for bad in ("/mnt/b1/logs,/mnt/b1/logs", "/mnt/b1/logs,,/mnt/b2/logs"):
        message = error(path=bad)
        assert f"option path={bad!r}" in message and "each one once" in message


def test_kafka_settings_checked_by_name_and_warned_when_without_effect(caplog):
    """kafka.* must be a Kafka consumer setting (a typo is refused with the real name); one the
    source does not apply is accepted and named in a warning, as are the Kafka source's tuning
    options."""
    assert "kafka.bootstrap.server is not a Kafka consumer setting; did you mean kafka.bootstrap.servers?" in \
        error(**{"kafka.bootstrap.server": "h:1"})
    assert "did you mean kafka.max.poll.records?" in error(**{"kafka.max.poll.record": "5"})
    with caplog.at_level("WARNING", logger="pyspark_seglog"):
        stream(**{"kafka.max.poll.records": "500", "kafka.group.id": "g", "kafka.max.partition.fetch.bytes": "65536",
                  "kafka.isolation.level": "read_committed", "groupIdPrefix": "p"})
    warned = [r.getMessage() for r in caplog.records if "without effect" in r.getMessage()]
    assert len(warned) == 2, warned
    assert "kafka.group.id, kafka.max.poll.records tune Kafka's consumer" in warned[0]
    assert "groupIdPrefix tune the Kafka source's consumer" in warned[1]
