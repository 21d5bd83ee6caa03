"""A small Java program of these tests (a .java file next to them), compiled with `javac` against
jars of tests/kafka_reference.py's Maven cache into a temporary folder and run with `java`: the
Java client checks (java_check.py) and the Kafka Streams application use it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
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
        """Compile SOURCES together; the first one's class is the program's main class."""
        javac = shutil.which("javac")
        if javac is None or shutil.which("java") is None:
            raise JavaUnavailable("no `javac`/`java` on PATH (apt-get install -y openjdk-17-jdk-headless)")
        jar_path = os.pathsep.join(str(j) for j in jars)
        built = subprocess.run([javac, "-d", str(classes), "-cp", jar_path, *map(str, sources)],
                               capture_output=True, text=True, timeout=180)
        if built.returncode != 0:
            raise RuntimeError(f"javac {' '.join(s.name for s in sources)} failed:\n{built.stderr[-4000:]}")
        return cls(sources[0].stem, f"{classes}{os.pathsep}{jar_path}", log4j)

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
