"""Apache Kafka's Java clients as these tests run them: a check program (JavaClientCheck.java or
TransactionCheck.java, next to this file) compiled together with what the checks share
(Clients.java: the client settings; CheckOutput.java: the JSON lines they print) against the
kafka-clients jar. JavaClientCheck runs once against a broker or a cluster: shared by
tests/kafka_clients (one seglog broker) and tests/cluster (three)."""
from __future__ import annotations

import json
from pathlib import Path

from java_program import JavaProgram, JavaUnavailable
from kafka_reference import kafka_unavailable

HERE = Path(__file__).resolve().parent
SHARED_SOURCES = (HERE / "Clients.java", HERE / "CheckOutput.java")
TS_BASE = 1_700_000_000_000
# kafka-clients and what it loads at run time: the codecs, slf4j and log4j2 (WARN to stderr)
CLIENT_JARS = ("kafka-clients-", "lz4-java-", "snappy-java-", "zstd-jni-", "slf4j-api-", "log4j-api-",
               "log4j-core-", "log4j-slf4j-impl-")


def compile_client_check(kafka_jars, main_source: str, classes: Path) -> JavaProgram:
    """MAIN_SOURCE (a file name next to this one) and the shared sources, compiled into CLASSES
    against the kafka-clients jars; JavaUnavailable without a JDK or a kafka-clients jar."""
    jars = [j for j in kafka_jars.jars if j.name.startswith(CLIENT_JARS)]
    if not any(j.name.startswith("kafka-clients-") for j in jars):
        raise JavaUnavailable(f"no kafka-clients jar in {kafka_jars.folder}")
    return JavaProgram.compile([HERE / main_source, *SHARED_SOURCES], jars, classes,
                               kafka_jars.folder / "log4j2-tools.properties")


def run_java_client_check(kafka_jars, bootstrap: str, tmp_path_factory) -> dict[str, dict]:
    """Compile JavaClientCheck.java and run it on `bootstrap`: {scenario: its JSON row}. Without a
    JDK it skips (or fails under SEGLOG_REQUIRE_KAFKA)."""
    try:
        program = compile_client_check(kafka_jars, "JavaClientCheck.java", tmp_path_factory.mktemp("java-classes"))
    except JavaUnavailable as exc:
        kafka_unavailable(str(exc))
    run = program.run([bootstrap, str(TS_BASE)], timeout=240)
    assert run.returncode == 0, run.stderr[-4000:]
    results = {}
    for line in run.stdout.splitlines():
        row = json.loads(line)
        results[row["scenario"]] = row
    assert "consumer_group_protocol" in results, run.stdout[-2000:] + run.stderr[-2000:]
    return results
