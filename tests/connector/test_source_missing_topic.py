"""A read of a topic that does not exist fails when the query starts, naming the topic and the
root (as Spark's Kafka source fails with UnknownTopicOrPartition), instead of returning no rows;
a subscribePattern that matches nothing warns. Through the reader calls Spark makes on the
driver (partitions(), initialOffset()), without a Spark session."""
from __future__ import annotations

import logging

import pytest

from logcore.errors import TopicNotFoundError
from logcore.log.log_root import LogRoot
from pyspark_seglog.source import SeglogBatchReader, SeglogStreamReader


@pytest.fixture
def root(tmp_path) -> str:
    r = LogRoot.open(str(tmp_path / "r"), create=True)
    r.create_topic("t", 2)
    r.close()
    return str(tmp_path / "r")


def test_subscribe_to_a_missing_topic_fails_naming_it(root):
    reader = SeglogBatchReader({"path": root, "subscribe": "t,nope"}, None)
    with pytest.raises(TopicNotFoundError, match=r"^UNKNOWN_TOPIC_OR_PARTITION: topic nope of option subscribe"
                                                 rf" does not exist in {root}$"):
        reader.partitions()
    stream = SeglogStreamReader({"path": root, "subscribe": "nope,gone"}, None)
    with pytest.raises(TopicNotFoundError, match="topics nope, gone of option subscribe do not exist"):
        stream.initialOffset()
    # the topics that exist read as before
    assert len(SeglogBatchReader({"path": root, "subscribe": "t"}, None).partitions()) == 0   # empty: no tasks


def test_assign_of_a_missing_topic_or_partition_fails(root):
    reader = SeglogBatchReader({"path": root, "assign": '{"t": [0, 5], "nope": [0]}'}, None)
    with pytest.raises(TopicNotFoundError, match="topic or partitions nope, t-5 of option assign do not exist"):
        reader.partitions()


def test_a_pattern_matching_nothing_warns(root, caplog):
    with caplog.at_level(logging.WARNING, logger="pyspark_seglog.source"):
        assert SeglogBatchReader({"path": root, "subscribePattern": "no.*"}, None).partitions() == []
    assert f"subscribePattern=no.* matches no topic in {root}: nothing is read" in caplog.text
