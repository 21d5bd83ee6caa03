"""Shared helpers for seglog benchmarks: timing, the table every benchmark prints, and stopping
the servers a benchmark started."""
from __future__ import annotations

import subprocess
import time


def best_of(fn, repeat: int = 5, warmup: int = 1) -> float:
    """Best wall time of `fn()` over `repeat` runs, after `warmup` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def print_table(title: str, rows: list[tuple[str, float, float, str]]) -> list[str]:
    """Rows: (metric, seglog figure, anchor figure, unit). Prints figure, anchor and their ratio."""
    lines = [f"### {title}", "", "| metric | seglog | anchor | ratio |", "|---|---:|---:|---:|"]
    for metric, value, anchor, unit in rows:
        ratio = value / anchor if anchor else float("nan")
        lines.append(f"| {metric} | {value:,.1f} {unit} | {anchor:,.1f} {unit} | {ratio:.2f}x |")
    text = "\n".join(lines)
    print(text + "\n", flush=True)
    return lines


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Stop a server this benchmark started: SIGTERM, and SIGKILL when it has not exited after
    `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
