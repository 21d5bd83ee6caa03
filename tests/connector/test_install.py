"""seglog installed the way the README says, then used from Spark the way a user does.

Each test copies this source tree (without build outputs) to a temporary folder, installs the copy
with pip into a new virtual environment and runs a Spark script in a fresh process with no
PYTHONPATH and no register call. The new environment reuses this interpreter's site-packages
for the dependencies (a .pth line, so no dependency is downloaded), and pip builds the copy with
the setuptools found there when it is new enough (--no-build-isolation), compiling the C
extensions for real.
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json, os, pkgutil, sys
    from pyspark.sql import SparkSession

    root = sys.argv[1]
    spark = (SparkSession.builder.master("local[2]").appName("seglog-install-test")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
    df = spark.createDataFrame(rows, "key binary, value binary")
    df.write.format("seglog").mode("append").option("topic", "t").option("topic.partitions", 2).save(root)
    read = spark.read.format("seglog").option("subscribe", "t").load(root)
    values = sorted(r.value.decode() for r in read.select("value").collect())
    import logcore.records._fastcodec as codec
    print(json.dumps({
        "values": values,
        "listed": [m.module_finder.path for m in pkgutil.iter_modules() if m.name == "pyspark_seglog"],
        "codec": codec.__file__,
    }))
    spark.stop()
''')


def _skip_without_java() -> None:
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("no Java runtime (java on PATH or JAVA_HOME) for Spark")


def _copy_source_tree(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("build", "dist", "*.so", "*.egg-info", "__pycache__", ".git",
                                    ".pytest_cache", ".hypothesis", "seglog-quickstart",
                                    "seglog-changelog", "results")
    shutil.copytree(CHECKOUT, dest, ignore=ignore)
    assert not list(dest.rglob("*.so"))
    return dest


def _venv(path: Path) -> Path:
    """A virtual environment whose own site-packages is empty; this interpreter's site-packages
    (pyspark, pyarrow, setuptools, pip...) come after it on sys.path."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # named so that it sorts after setuptools' __editable__ .pth files: their entries come first
    Path(purelib, "zz_seglog_test_base_env.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    return python


def _env(python: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python),
               SPARK_LOCAL_IP="127.0.0.1")
    return env


def _build_flags() -> list[str]:
    """Build with this environment's setuptools when it is new enough for pyproject.toml (>= 77);
    a fresh venv's own is older, and pip then builds in isolation, fetching setuptools."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        major = int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        major = 0
    return ["--no-build-isolation", "--no-index"] if major >= 77 else []


def _pip_install(python: Path, *args: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                           *_build_flags(), *args],
                          capture_output=True, text=True, timeout=600, env=_env(python))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _run_script(python: Path, script: Path, root: Path, cwd: Path) -> dict:
    import json
    proc = subprocess.run([str(python), str(script), str(root)], cwd=cwd, env=_env(python),
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _expected_values() -> list[str]:
    return sorted(f"v{i}" for i in range(100))


@pytest.mark.timeout(900)    # two pip builds of the C extensions and a Spark session
def test_editable_install_lets_spark_find_format_seglog_without_register(tmp_path):
    """`pip install -e .` (the README's second command): Spark's lookup lists top-level
    `pyspark_*` modules with pkgutil; setuptools' editable import hook alone is invisible to it."""
    _skip_without_java()
    src = _copy_source_tree(tmp_path / "checkout")
    python = _venv(tmp_path / "venv")
    _pip_install(python, "-e", str(src))
    work = tmp_path / "elsewhere"
    work.mkdir()
    script = work / "job.py"
    script.write_text(SCRIPT)
    out = _run_script(python, script, work / "root", cwd=work)
    assert out["values"] == _expected_values()
    assert out["listed"][0] == str(src / "connector")
    assert Path(out["codec"]).parent == src / "logcore" / "records"


@pytest.mark.timeout(900)
@pytest.mark.soak          # ~25 s: -m soak (the README's first command installs with pip install . and runs the quickstart)
def test_own_spark_script_runs_from_the_checkout_after_a_regular_install(tmp_path):
    """`pip install .`, then a script of one's own in the checkout's top folder: Spark's workers
    start in that folder and import its `logcore` first, so the build leaves the compiled codec
    there too."""
    _skip_without_java()
    src = _copy_source_tree(tmp_path / "checkout")
    python = _venv(tmp_path / "venv")
    _pip_install(python, str(src))
    assert list((src / "logcore" / "records").glob("_fastcodec*.so"))
    assert list((src / "logcore" / "cleaner").glob("_offsetmap*.so"))
    script = src / "my_job.py"
    script.write_text(SCRIPT)
    out = _run_script(python, script, tmp_path / "root", cwd=src)
    assert out["values"] == _expected_values()
    # the installed package is what Spark lists; the workers' logcore is the checkout's, built
    assert "site-packages" in out["listed"][0]
    assert Path(out["codec"]).parent == src / "logcore" / "records"
