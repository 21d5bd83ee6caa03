"""The long Jepsen-style run: fresh 3-broker seglog clusters under random faults, one run after
another, until the time is up; each run's history checked (tests/cluster/checker.py).

    python bench/jepsen_cluster.py --minutes 20 --seed 1
    python bench/jepsen_cluster.py --minutes 60 --seed 100 --zookeepers 3 --run-seconds 90
    python bench/jepsen_cluster.py --runs 1 --seed 7 --configs rf3 --faults controlled-shutdown,elect-preferred
    python bench/jepsen_cluster.py --runs 1 --seed 5 --configs rf3 --run-seconds 45 --faults full-disk,kill
    python bench/jepsen_cluster.py --runs 1 --seed 1 --configs rf3 --run-seconds 20 --inter-broker sasl_ssl

Every fault kind of tests/cluster/jepsen.py is in the default --faults. With full-disk (a
leader's filesystem filled to ENOSPC: the broker exits by itself; freed and restarted at heal) each broker's log.dirs is on a 256 MiB
tmpfs of its own, which needs root (without it the fault is skipped, the reason recorded). Runs go through the
--configs in turn (run i uses configuration i mod their number):
    rf3        replication factor 3, min.insync.replicas 2 (the default)
    fsync      rf3 with flush.messages=1 on the topic: adds lost-tail-all (a whole-cluster
               power cut), which no other configuration can survive, and leaves the fast
               restarts no unsynced tail to cut
    rebalance  rf3 with auto.leader.rebalance.enable (checked every 2 s): leaders move back
               to their preferred replica by themselves, under load
    isr1       replication factor 3, min.insync.replicas 1
    rf2        replication factor 2, min.insync.replicas 1
    unclean    replication factor 3, min.insync.replicas 1, unclean.leader.election.enable=true
               on the topic: what an unclean election loses (acknowledged records, offsets
               written again) is counted apart as expected, on the partitions whose controller
               logged one, and printed as "lost after unclean election: N"; without one a loss
               is an anomaly as anywhere else (alone-then-kill is the fault that causes them)

--inter-broker sasl_ssl puts the brokers' own traffic (followers' fetches, the controller's and the
coordinators' calls) on a SASL_SSL listener of its own: SASL PLAIN inside mutual TLS with hostname
verification, certificates made with `cryptography` (tests/security/pki.py); the clients stay on
PLAINTEXT, and the harness's proxies (the partition faults) sit in front of the SASL_SSL listener.

Run i uses seed (--seed + i), so a failing run is replayed with `--seed N --runs 1` (fault
timing is wall-clock, so a replay is the same schedule of faults, not the same interleaving).
Prints one summary per run and at the end two tables: the runs (seed, configuration, faults,
acknowledged writes, final records, anomalies, losses after unclean elections, seconds) and the
fault kinds (faults done, what they did, acknowledged writes while one was on, anomalies after
one); exit status 1 when any run had an anomaly or a harness error. Each run's files (history.jsonl,
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

CONFIGS = {
    "rf3": {},
    "fsync": {"fsync": True},
    "rebalance": {"auto_rebalance": True},
    "isr1": {"min_insync": 1},
    "rf2": {"replication_factor": 2, "min_insync": 1},
    "unclean": {"replication_factor": 3, "min_insync": 1, "unclean": True},
}


INTER_BROKER_USER, INTER_BROKER_PASSWORD = "broker", "broker-secret"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def inter_broker_props(protocol: str, folder: Path) -> dict:
    """The brokers' settings for an inter-broker listener INTERNAL of `protocol` (none for plaintext)."""
    if protocol == "plaintext":
        return {}
    sys.path.insert(0, str(REPO / "tests" / "security"))
    from pki import STORE_PASSWORD, Pki
    pki = Pki(folder)
    login = (f'{PLAIN_MODULE} required username="{INTER_BROKER_USER}" password="{INTER_BROKER_PASSWORD}"'
             f' user_{INTER_BROKER_USER}="{INTER_BROKER_PASSWORD}";')
    return {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": login,
            "listener.name.internal.ssl.client.auth": "required",
            "ssl.keystore.location": str(pki.broker_p12), "ssl.keystore.password": STORE_PASSWORD,
            "ssl.truststore.location": str(pki.truststore_p12), "ssl.truststore.password": STORE_PASSWORD}


def _pair(text: str) -> tuple[float, float]:
    lo, hi = (float(x) for x in text.split(","))
    if not 0 <= lo <= hi:
        raise SystemExit(f"expected min,max with 0 <= min <= max, got {text!r}")
    return lo, hi


def _table(header, rows) -> None:
    cells = [tuple(str(c) for c in header)] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for n, r in enumerate(cells):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


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
                    help=f"comma-separated subset of: {', '.join(ALL_FAULTS)} (full-disk: a leader's"
                         " disk filled to ENOSPC, the broker exits; log.dirs on tmpfs mounts, root only)")
    ap.add_argument("--rate", type=float, default=40.0, help="sends per second per producer")
    ap.add_argument("--group-consumers", type=int, default=2,
                    help="members of one consumer group (subscribe, rebalances, commits checked)")
    ap.add_argument("--fault-length", default="4,15", help="min,max seconds a fault lasts")
    ap.add_argument("--fault-gap", default="2,8", help="min,max seconds between a heal and the next fault")
    ap.add_argument("--configs", default="rf3,fsync,rebalance,rf2",
                    help=f"comma-separated configurations taken in turn, of: {', '.join(CONFIGS)}")
    ap.add_argument("--schedule", choices=("random", "cycle"), default="random",
                    help="random fault kinds, or each of --faults in turn")
    ap.add_argument("--keep", default=None, help="directory to keep every run's files in")
    ap.add_argument("--client-debug", default="", help="librdkafka debug contexts for the producers "
                    "(e.g. msg,protocol,broker), logged to client-<producer>.log in the run's directory")
    ap.add_argument("--inter-broker", choices=("plaintext", "sasl_ssl"), default="plaintext",
                    help="the brokers' own listener: PLAINTEXT (the clients' one) or a SASL_SSL one of its own")
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

    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad or not configs:
        print(f"--configs: unknown {bad}; known: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    if "lost-tail-all" in faults and "fsync" not in configs:
        print("note: lost-tail-all runs only in the fsync configuration, which --configs does not name",
              file=sys.stderr)

    keep = Path(args.keep) if args.keep else None
    pki_dir = (keep / "pki") if keep else Path(tempfile.mkdtemp(prefix="jepsen-pki-"))
    security_props = inter_broker_props(args.inter_broker, pki_dir)
    deadline = time.monotonic() + args.minutes * 60
    totals = Counter()
    fault_totals = Counter()
    anomalies = Counter()
    expected = Counter()                # point 11 of checker.py: after unclean elections
    bad_runs = []
    rows = []                           # one per run
    kinds = {}                          # kind -> faults, acked_during, anomalies_after
    effects = Counter()
    i = 0
    while time.monotonic() < deadline and (not args.runs or i < args.runs):
        seed = args.seed + i
        config = configs[i % len(configs)]
        base = (keep / f"run-{seed}") if keep else Path(tempfile.mkdtemp(prefix=f"jepsen-{seed}-"))
        opts = Options(seed=seed, duration=args.run_seconds, partitions=args.partitions,
                       zookeepers=args.zookeepers, faults=faults, rate=args.rate,
                       fault_length=_pair(args.fault_length), fault_gap=_pair(args.fault_gap),
                       client_debug=args.client_debug, schedule=args.schedule,
                       group_consumers=args.group_consumers, broker_props=dict(security_props),
                       **CONFIGS[config])
        print(f"--- seed {seed}, configuration {config}: python bench/jepsen_cluster.py --runs 1 --seed {seed} "
              f"--configs {config} --run-seconds {args.run_seconds:g} --zookeepers {args.zookeepers} "
              f"--partitions {args.partitions} --rate {args.rate:g} --group-consumers {args.group_consumers} "
              f"--fault-length {args.fault_length} --fault-gap {args.fault_gap} --faults {','.join(faults)}"
              f"{' --schedule cycle' if args.schedule == 'cycle' else ''}"
              f"{' --inter-broker ' + args.inter_broker if args.inter_broker != 'plaintext' else ''}", flush=True)
        try:
            report = run_once(base, opts)
        except Exception as e:          # noqa: BLE001 - report the run and go on
            print(f"seed {seed}: harness error {e!r} (files in {base})", flush=True)
            bad_runs.append(seed)
            rows.append((seed, config, "-", "-", "-", f"harness error {type(e).__name__}", "-", "-"))
            i += 1
            continue
        print(report.summary(), flush=True)
        effects.update(report.effects)
        for kind, v in report.per_fault.items():
            k = kinds.setdefault(kind, Counter())
            k.update(v)
        rows.append((seed, config, sum(report.faults.values()), report.result.stats.get("sends_ok", 0),
                     report.final_records,
                     ", ".join(f"{k} {n}" for k, n in sorted(report.result.counts.items())) or "0",
                     report.result.expected.get("lost-after-unclean-election", 0)
                     if report.result.stats.get("unclean_elections") else "-",
                     f"{report.duration:.0f}"))
        s = report.result.stats
        totals["runs"] += 1
        totals["faults"] += sum(report.faults.values())
        totals["acknowledged"] += s.get("sends_ok", 0)
        totals["records"] += report.final_records
        fault_totals.update(report.faults)
        anomalies.update(report.result.counts)
        expected.update(report.result.expected)
        if not report.result.valid or report.errors:
            bad_runs.append(seed)
            print(f"  files kept in {base}", flush=True)
        elif not keep:
            shutil.rmtree(base, ignore_errors=True)
        i += 1

    print()
    _table(("seed", "config", "faults", "acked", "final records", "anomalies", "lost after unclean election",
            "s"), rows)
    print()
    krows = []
    for kind in [k for k in ALL_FAULTS if k in kinds]:
        did = "; ".join(f"{e.split(': ', 1)[1]} {n}" for e, n in sorted(effects.items())
                        if e.startswith(kind + ": "))
        krows.append((kind, kinds[kind]["faults"], kinds[kind]["acked_during"], kinds[kind]["anomalies_after"],
                      did or "-"))
    _table(("fault", "done", "acked during", "anomalies after", "what it did"), krows)
    print(f"\n{totals['runs']} runs x {totals['faults']} faults x {totals['records']} records "
          f"({totals['acknowledged']} acknowledged writes): "
          f"{sum(anomalies.values())} anomalies {dict(anomalies) if anomalies else ''}")
    if expected:
        print(f"expected after unclean elections (not anomalies; Kafka documents them): {dict(expected)}")
    print(f"faults by kind: {dict(fault_totals)}")
    if bad_runs:
        print(f"runs with anomalies or harness errors: seeds {bad_runs}")
    if not keep:
        shutil.rmtree(pki_dir, ignore_errors=True)
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
