"""Run `seglog` with every fsync/fdatasync of a segment file recorded, so that a test can cut a
stopped broker's segments back to what had reached the disk (a power cut, not a crash: after
SIGKILL alone the page cache keeps every byte written).

    python tests/cluster/fsync_journal.py JOURNAL broker --config broker.properties

Before logcore is imported, os.fsync and os.fdatasync are wrapped: for a descriptor of a `.log`
file, the file's size when the call is made (what the call makes durable; bytes appended while
it runs may not be) is appended to JOURNAL as "size path" just before the call. One O_APPEND
write per line, so lines of concurrent calls never interleave. A SIGKILL inside the call counts
that sync as done: the cut may keep a little more than a real power cut would (a test can miss a
loss that way, it never invents one). Everything else runs as `python -m logcore.tools.cli ARGS`. A truncation is not recorded: bytes appended again
after one count as synced up to the last sync's size (less loss than a real power cut, never more).

`synced_sizes(JOURNAL)` reads it back: {resolved path: the size at its last completed sync}.
"""
from __future__ import annotations

import os
import sys


def _wrap(real, journal_fd: int):
    def synced(fd):
        number = fd if isinstance(fd, int) else fd.fileno()
        try:
            path = os.readlink(f"/proc/self/fd/{number}")
            size = os.fstat(number).st_size if path.endswith(".log") else None
        except OSError:
            size = None
        if size is not None:
            os.write(journal_fd, f"{size} {path}\n".encode())
        real(fd)
    synced.__name__ = real.__name__
    return synced


def synced_sizes(journal) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        text = open(journal, encoding="utf-8", errors="replace").read()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        size, _, path = line.partition(" ")
        if path and size.isdigit():
            out[path] = int(size)          # the last completed sync of that file wins
    return out


def main() -> None:
    journal, args = sys.argv[1], sys.argv[2:]
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.fsync = _wrap(os.fsync, fd)
    os.fdatasync = _wrap(os.fdatasync, fd)
    import runpy
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]                    # this folder's modules are not the broker's
    sys.argv = ["seglog", *args]
    runpy.run_module("logcore.tools.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
