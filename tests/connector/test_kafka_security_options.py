"""The connector's broker path refuses Spark's Kafka security options by name (it reaches
brokers over PLAINTEXT only) instead of accepting and ignoring them."""
from __future__ import annotations

import pytest

from logcore.errors import InvalidConfigError
from pyspark_seglog.sink_options import parse_sink_options
from pyspark_seglog.source_options import check_option_names


@pytest.mark.parametrize("name, value", [
    ("kafka.security.protocol", "SASL_SSL"), ("kafka.sasl.mechanism", "PLAIN"),
    ("kafka.sasl.jaas.config", "x required;"), ("kafka.ssl.truststore.location", "/t.p12"),
])
def test_security_options_are_refused(name, value):
    with pytest.raises(InvalidConfigError, match="PLAINTEXT only"):
        check_option_names({name: value, "subscribe": "t"})
    with pytest.raises(InvalidConfigError, match="PLAINTEXT only"):
        parse_sink_options({name: value, "kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"})


def test_plaintext_is_accepted():
    check_option_names({"kafka.security.protocol": "plaintext", "subscribe": "t"})
    parse_sink_options({"kafka.security.protocol": "PLAINTEXT", "kafka.bootstrap.servers": "127.0.0.1:9092",
                        "topic": "t"})
