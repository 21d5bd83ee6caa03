"""Runs Apache Kafka's Java clients (JavaClientCheck.java, next to this file) against a broker or
a cluster: shared by tests/kafka_clients (one seglog broker) and tests/cluster (three)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
TS_BASE = 1_700_000_000_000
# kafka-clients and what it loads at run time: the codecs, slf4j and log4j2 (WARN to stderr)
CLIENT_JARS = ("kafka-clients-", "lz4-java-", "snappy-java-", "zstd-jni-", "slf4j-api-", "log4j-api-",
               "log4j-core-", "log4j-slf4j-impl-")


def run_java_client_check(kafka_jars, bootstrap: str, tmp_path_factory, unavailable) -> dict[str, dict]:
    """Compile JavaClientCheck.java against the kafka-clients jar and run it on `bootstrap`:
    {scenario: its JSON row}. `unavailable(reason)` skips (or fails under SEGLOG_REQUIRE_KAFKA)."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        unavailable("no `javac`/`java` on PATH (apt-get install -y openjdk-17-jdk-headless)")
    jars = [j for j in kafka_jars.jars if j.name.startswith(CLIENT_JARS)]
    if not any(j.name.startswith("kafka-clients-") for j in jars):
        unavailable(f"no kafka-clients jar in {kafka_jars.folder}")
    classpath = ":".join(str(j) for j in jars)
    classes = tmp_path_factory.mktemp("java-classes")
    built = subprocess.run([javac, "-d", str(classes), "-cp", classpath, str(HERE / "JavaClientCheck.java")],
                           capture_output=True, text=True, timeout=180)
    assert built.returncode == 0, built.stderr
    run = subprocess.run(
        [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
         f"-Dlog4j2.configurationFile={kafka_jars.folder / 'log4j2-tools.properties'}",
         "-cp", f"{classes}:{classpath}", "JavaClientCheck", bootstrap, str(TS_BASE)],
        capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-4000:]
    results = {}
    for line in run.stdout.splitlines():
        row = json.loads(line)
        results[row["scenario"]] = row
    assert "consumer_group_protocol" in results, run.stdout[-2000:] + run.stderr[-2000:]
    return results
