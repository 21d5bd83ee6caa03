"""Stacks of a stuck job's processes, for a test's failure message.

A Spark job run as a process of its own (driver, JVM, Python workers) that does not finish in
its bound is killed by the test; before that, this says where each of its processes was: the
JVM's threads through the JDK's `jstack`, each Python process through `py-spy dump` (a test
dependency). A tool that is missing or fails says so in the dump instead.
"""
from __future__ import annotations

import os
import shutil
import subprocess


def _members(root: int) -> list[int]:
    """`root` and its descendants (Spark's Python daemons start sessions of their own, so a
    process group does not hold them all)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return sorted(found)


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _run(args: list[str]) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({args[0]} failed: {exc})"
    return done.stdout + (done.stderr if done.returncode else "")


def dump_group(root: int, limit: int = 60_000) -> str:
    """Where process `root` and each of its descendants is now (JVM threads, Python stacks)."""
    jstack, py_spy = shutil.which("jstack"), shutil.which("py-spy")
    out = []
    for pid in _members(root):
        command = _command(pid)
        out.append(f"==== pid {pid}: {command[:300]}")
        if "java" in command.split(" ")[0]:
            out.append(_run([jstack, str(pid)]) if jstack else "(no jstack on PATH)")
        elif "python" in command.split(" ")[0]:
            out.append(_run([py_spy, "dump", "--pid", str(pid)]) if py_spy else "(no py-spy on PATH)")
    text = "\n".join(out)
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"
