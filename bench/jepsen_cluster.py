"""The long Jepsen-style run: fresh 3-broker seglog clusters under random faults, one run after
another, until the time is up; each run's history checked (tests/cluster/checker.py).

    python bench/jepsen_cluster.py --minutes 20 --seed 1
    python bench/jepsen_cluster.py --minutes 60 --seed 100 --zookeepers 3 --run-seconds 90

Run i uses seed (--seed + i), so a failing run is replayed with `--seed N --runs 1` (fault
timing is wall-clock, so a replay is the same schedule of faults, not the same interleaving).
Prints one summary per run and at the end runs x faults x records and the anomalies; exit
status 1 when any run had an anomaly or a harness error. Each run's files (history.jsonl,
final.json, broker logs and log.dirs) are kept under --keep (default: a temporary directory,
removed after a valid run).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "connector"))

from harness import cluster_support  # noqa: E402
from jepsen import ALL_FAULTS, Options, run_once  # noqa: E402


def _pair(text: str) -> tuple[float, float]:
    lo, hi = (float(x) for x in text.split(","))
    if not 0 <= lo <= hi:
        raise SystemExit(f"expected min,max with 0 <= min <= max, got {text!r}")
    return lo, hi


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20.0, help="total wall time to keep starting runs")
    ap.add_argument("--runs", type=int, default=0, help="stop after this many runs (0: until --minutes)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the first run; run i uses seed + i")
    ap.add_argument("--run-seconds", type=float, default=60.0, help="workload time under faults per run")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--zookeepers", type=int, choices=(1, 3), default=3,
                    help="standalone ZooKeeper or a 3-node ensemble (adds the zk-leader fault)")
    ap.add_argument("--faults", default=",".join(ALL_FAULTS),
                    help=f"comma-separated subset of: {', '.join(ALL_FAULTS)}")
    ap.add_argument("--rate", type=float, default=40.0, help="sends per second per producer")
    ap.add_argument("--fault-length", default="4,15", help="min,max seconds a fault lasts")
    ap.add_argument("--fault-gap", default="2,8", help="min,max seconds between a heal and the next fault")
    ap.add_argument("--keep", default=None, help="directory to keep every run's files in")
    ap.add_argument("--client-debug", default="", help="librdkafka debug contexts for the producers "
                    "(e.g. msg,protocol,broker), logged to client-<producer>.log in the run's directory")
    args = ap.parse_args(argv)

    reason = cluster_support()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    bad = [f for f in faults if f not in ALL_FAULTS]
    if bad:
        print(f"--faults: unknown {bad}; known: {', '.join(ALL_FAULTS)}", file=sys.stderr)
        return 2

    keep = Path(args.keep) if args.keep else None
    deadline = time.monotonic() + args.minutes * 60
    totals = Counter()
    fault_totals = Counter()
    anomalies = Counter()
    bad_runs = []
    i = 0
    while time.monotonic() < deadline and (not args.runs or i < args.runs):
        seed = args.seed + i
        base = (keep / f"run-{seed}") if keep else Path(tempfile.mkdtemp(prefix=f"jepsen-{seed}-"))
        opts = Options(seed=seed, duration=args.run_seconds, partitions=args.partitions,
                       zookeepers=args.zookeepers, faults=faults, rate=args.rate,
                       fault_length=_pair(args.fault_length), fault_gap=_pair(args.fault_gap),
                       client_debug=args.client_debug)
        try:
            report = run_once(base, opts)
        except Exception as e:          # noqa: BLE001 - report the run and go on
            print(f"seed {seed}: harness error {e!r} (files in {base})", flush=True)
            bad_runs.append(seed)
            i += 1
            continue
        print(report.summary(), flush=True)
        s = report.result.stats
        totals["runs"] += 1
        totals["faults"] += sum(report.faults.values())
        totals["acknowledged"] += s.get("sends_ok", 0)
        totals["records"] += report.final_records
        fault_totals.update(report.faults)
        anomalies.update(report.result.counts)
        if not report.result.valid or report.errors:
            bad_runs.append(seed)
            print(f"  files kept in {base}", flush=True)
        elif not keep:
            shutil.rmtree(base, ignore_errors=True)
        i += 1

    print(f"\n{totals['runs']} runs x {totals['faults']} faults x {totals['records']} records "
          f"({totals['acknowledged']} acknowledged writes): "
          f"{sum(anomalies.values())} anomalies {dict(anomalies) if anomalies else ''}")
    print(f"faults by kind: {dict(fault_totals)}")
    if bad_runs:
        print(f"runs with anomalies or harness errors: seeds {bad_runs}")
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
