"""Counting the calls a class's methods get during a test (the requests a store makes, say)."""
from __future__ import annotations

import threading
from collections import Counter


def count_calls(monkeypatch, cls: type, names, thread_prefix: str | None = None) -> Counter:
    """Wrap each method of `cls` named in `names` (for the test, through `monkeypatch`) so that
    every call, on any instance, is counted by name before it goes on; the live counts. With
    `thread_prefix`, the calls made on threads whose name starts with it are also counted
    under "<name>@<thread_prefix>"."""
    counts: Counter = Counter()
    for name in names:
        real = getattr(cls, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            if thread_prefix and threading.current_thread().name.startswith(thread_prefix):
                counts[f"{_name}@{thread_prefix}"] += 1
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(cls, name, counted)
    return counts
