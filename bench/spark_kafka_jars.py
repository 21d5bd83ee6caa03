"""Spark's own Kafka connector (`org.apache.spark:spark-sql-kafka-0-10_2.13`) for benchmarks, and
the Maven resolution it uses for any other jar a benchmark puts beside pyspark's.

`resolve_maven_jars(name, coordinates)` resolves artifacts and their runtime dependencies with
`mvn dependency:copy-dependencies` into a cache folder outside the checkout
(``$SEGLOG_KAFKA_CACHE`` or ``~/.cache/seglog-kafka``, beside Kafka's jars), once per name, and
keeps only the jars pyspark does not ship. `resolve_spark_kafka_jars()` resolves the connector
and its runtime dependencies (kafka-clients, commons-pool2, the token provider) that way; Spark's
own jars are `provided` and not copied (pyspark ships them). The result goes to `spark.jars`.

The connector version is the installed pyspark's when Maven Central has it, else
``SEGLOG_SPARK_KAFKA_VERSION`` or `FALLBACK_VERSION` (the newest release there): the connector
only uses Spark's DataSource V2 API, which is stable across 4.x minor versions.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

from kafka_anchor import KafkaUnavailable, kafka_reference

# Maven Central's newest spark-sql-kafka-0-10_2.13 release when this was written (the installed
# pyspark 4.3.0 has no connector there).
FALLBACK_VERSION = "4.2.0"
MVN_TIMEOUT_S = 900

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>seglog.reference</groupId>
  <artifactId>bench-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
_DEPENDENCY = ("    <dependency><groupId>{0}</groupId><artifactId>{1}</artifactId><version>{2}</version>"
               "</dependency>")


def _cache_root() -> Path:
    base = os.environ.get("SEGLOG_KAFKA_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "seglog-kafka"


def _mvn(folder: Path, coordinates: list[str], jar_dir: Path) -> subprocess.CompletedProcess:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable(f"no `mvn` on PATH: install Maven to resolve {', '.join(coordinates)}")
    deps = "\n".join(_DEPENDENCY.format(*c.split(":")) for c in coordinates)
    (folder / "pom.xml").write_text(_POM.format(dependencies=deps))
    if jar_dir.exists():
        shutil.rmtree(jar_dir)
    try:
        return subprocess.run([mvn, "-q", "-B", "-f", str(folder / "pom.xml"), "dependency:copy-dependencies",
                               f"-DoutputDirectory={jar_dir}", "-DincludeScope=runtime"],
                              capture_output=True, text=True, timeout=MVN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise KafkaUnavailable(f"mvn did not resolve {', '.join(coordinates)} in {MVN_TIMEOUT_S}s") from None


def _artifact(jar_name: str) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients`: the name up to the first `-<digit>`."""
    return re.split(r"-\d", jar_name[:-4], maxsplit=1)[0]


def _pyspark_artifacts() -> set[str]:
    import pyspark
    folder = Path(pyspark.__file__).parent / "jars"
    return {_artifact(j.name) for j in folder.glob("*.jar")}


def resolve_maven_jars(name: str, coordinates: list[str]) -> list[Path]:
    """Jars of `coordinates` ("group:artifact:version") and their runtime dependencies, minus the
    artifacts pyspark ships, resolved once into <cache>/<name>/jars. Raises KafkaUnavailable with
    Maven's last lines when they cannot be resolved (remembered when Central has no such artifact)."""
    folder = _cache_root() / name
    folder.mkdir(parents=True, exist_ok=True)
    jar_dir, done, missing = folder / "jars", folder / "resolved", folder / "not-on-central"
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if missing.exists():
            raise KafkaUnavailable(f"{name}: {missing.read_text().strip()}")
        if not done.exists():
            proc = _mvn(folder, coordinates, jar_dir)
            if proc.returncode != 0:
                tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
                if "not found" in tail or "Could not find artifact" in tail:
                    missing.write_text(tail + "\n")
                raise KafkaUnavailable(f"{name}: {tail}")
            done.write_text("\n".join(sorted(p.name for p in jar_dir.glob("*.jar"))) + "\n")
    # Spark's own jars and the libraries it ships (hadoop-client, snappy, lz4, spark-tags) come
    # with pyspark: keep only the artifacts it lacks, so that no class is there twice.
    shipped = _pyspark_artifacts()
    return [j for j in sorted(jar_dir.glob("*.jar")) if _artifact(j.name) not in shipped]


def resolve_spark_kafka_jars(pyspark_version: str) -> tuple[str, list[Path]]:
    """(connector version used, jar paths) for the installed pyspark."""
    wanted = [os.environ["SEGLOG_SPARK_KAFKA_VERSION"]] if os.environ.get("SEGLOG_SPARK_KAFKA_VERSION") \
        else [pyspark_version, FALLBACK_VERSION]
    failures = []
    for version in dict.fromkeys(wanted):
        try:
            jars = resolve_maven_jars(f"spark-sql-kafka-{version}",
                                      [f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"])
        except KafkaUnavailable as exc:
            failures.append(str(exc))
            continue
        if any(j.name.startswith("spark-sql-kafka-0-10") for j in jars):
            return version, jars
        failures.append(f"{version}: no spark-sql-kafka jar in the resolved jars")
    raise KafkaUnavailable("cannot resolve org.apache.spark:spark-sql-kafka-0-10_2.13: " + "; ".join(failures))


__all__ = ["resolve_maven_jars", "resolve_spark_kafka_jars", "FALLBACK_VERSION", "kafka_reference"]
