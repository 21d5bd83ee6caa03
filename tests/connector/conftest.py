"""One real SparkSession (local[2]) for the whole test run, shared by every connector test.

Spark's Python workers must run this interpreter (it has seglog, pyarrow and pyspark), so
PYSPARK_PYTHON is pinned to it before the session starts.
"""
from __future__ import annotations

import os
import shutil
import sys

import pytest

pyspark = pytest.importorskip("pyspark")


def _java_available() -> str | None:
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return None
    return "no Java runtime (java on PATH or JAVA_HOME) for Spark"


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    reason = _java_available()
    if reason:
        pytest.skip(reason)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Spark finds format("seglog") by listing top-level `pyspark_*` modules on the workers'
    # sys.path. Installs put it there (test_install.py checks both kinds); the tests may also
    # run on sources that are not the installed ones, so the package imported here goes first.
    import pyspark_seglog
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(pyspark_seglog.__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (SparkSession.builder.master("local[2]")
               .appName("seglog-tests")
               .config("spark.driver.memory", "3g")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.warehouse.dir", str(warehouse))
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
