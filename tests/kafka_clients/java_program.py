"""A small Java program of these tests (a .java file next to them), compiled with `javac` against
jars of tests/kafka_reference.py's Maven cache and run with `java`: the Java client checks
(java_check.py) and the Kafka Streams application use it.

javac costs several seconds a program, so the classes are kept in a cache folder outside the
checkout (``$SEGLOG_JAVA_CACHE`` or ``~/.cache/seglog-java``), one folder per hash of what the
compilation read: the sources' names and bytes, the jars' paths, sizes and mtimes, and javac's
binary. A changed source or jar compiles again; nothing stale is ever run."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

JVM = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto"]


class JavaUnavailable(RuntimeError):
    """No JDK here: the message says what to install."""


@dataclass
class JavaProgram:
    main_class: str
    classpath: str          # the compiled classes first, then the jars
    log4j: Path             # WARN and above to stderr

    @classmethod
    def compile(cls, sources: list[Path], jars: list[Path], classes: Path, log4j: Path) -> "JavaProgram":
        """Compile SOURCES together; the first one's class is the program's main class. CLASSES
        is where they are compiled when the cache folder cannot be written."""
        javac = shutil.which("javac")
        if javac is None or shutil.which("java") is None:
            raise JavaUnavailable("no `javac`/`java` on PATH (apt-get install -y openjdk-17-jdk-headless)")
        jar_path = os.pathsep.join(str(j) for j in jars)
        try:
            compiled = _cached_classes(javac, sources, jars)
        except OSError:                         # no writable cache: compile for this run only
            compiled = classes
            _javac(javac, sources, jar_path, classes)
        return cls(sources[0].stem, f"{compiled}{os.pathsep}{jar_path}", log4j)

    def command(self, args: list[str], jvm: list[str] | None = None) -> list[str]:
        return [shutil.which("java"), *(jvm or JVM), f"-Dlog4j2.configurationFile={self.log4j}",
                "-cp", self.classpath, self.main_class, *args]

    def run(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(args), capture_output=True, text=True, timeout=timeout)

    def popen(self, args: list[str], jvm: list[str] | None = None, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.command(args, jvm), text=True, **kwargs)

    def json_rows(self, args: list[str], timeout: float = 120) -> list[dict]:
        """Run to completion; the JSON lines it printed (stderr in the error if it printed none)."""
        proc = self.run(args, timeout)
        rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if not rows:
            raise RuntimeError(f"{self.main_class} {' '.join(args)} printed nothing (exit {proc.returncode}):\n"
                               f"{proc.stderr[-4000:]}")
        return rows


def _javac(javac: str, sources: list[Path], jar_path: str, classes: Path) -> None:
    built = subprocess.run([javac, "-d", str(classes), "-cp", jar_path, *map(str, sources)],
                           capture_output=True, text=True, timeout=180)
    if built.returncode != 0:
        raise RuntimeError(f"javac {' '.join(s.name for s in sources)} failed:\n{built.stderr[-4000:]}")


def java_cache_dir() -> Path:
    base = os.environ.get("SEGLOG_JAVA_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "seglog-java"


def _compilation_key(javac: str, sources: list[Path], jars: list[Path]) -> str:
    h = hashlib.sha256()
    real = os.path.realpath(javac)          # the JDK's javac: a JDK update changes its mtime
    h.update(f"javac {real} {os.stat(real).st_mtime_ns}".encode())
    for source in sources:
        h.update(f"\0source {source.name}\0".encode())
        h.update(source.read_bytes())
    for jar in jars:
        st = jar.stat()
        h.update(f"\0jar {jar} {st.st_size} {st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


def _cached_classes(javac: str, sources: list[Path], jars: list[Path]) -> Path:
    """The folder holding SOURCES compiled against JARS: from the cache, or compiled into it now
    (into a temporary folder renamed into place, under a lock: concurrent sessions never see a
    half-written one)."""
    cache = java_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / _compilation_key(javac, sources, jars)
    if target.is_dir():
        return target
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not target.is_dir():
                tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
                try:
                    _javac(javac, sources, os.pathsep.join(str(j) for j in jars), tmp)
                    tmp.rename(target)
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        shutil.rmtree(tmp)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target
