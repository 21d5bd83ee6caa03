"""What TLS and SASL cost: produce and consume over SASL_SSL against PLAINTEXT on one `seglog broker`
and on one Apache Kafka 4.x broker, same machine, same run (issue 30).

Each broker has two listeners, PLAINTEXT and SASL_SSL (SASL PLAIN; a certificate made with
`cryptography` by tests/security/pki.py). The workload on each listener, with two clients (a lead
seen with one client only is not a claim):
- librdkafka (confluent_kafka, bench_broker.py's producer and consumer): --records x 1 KiB records,
  acks=all, idempotent, 4 partitions, unpaced; then an assign() consumer from offset 0;
- Kafka's Java ProducerPerformance (the Java client's defaults: acks=all, idempotent) and
  ConsumerPerformance from the earliest offset (bench_kafka_tools.py's Tools, given each listener's
  client properties through --producer.config / --consumer.config).

Both brokers run at once; a warm-up round (not reported), then --runs rounds; in each round every
system runs every client on one listener then the other, the orders alternating between rounds, so
that the two figures of a ratio are measured close together. Reported per system and row: the
SASL_SSL / PLAINTEXT throughput ratio, then seglog's ratio over Kafka's (above 1: TLS costs seglog
less of its throughput than it costs Kafka), and the broker's CPU seconds beside each figure.

    python bench/bench_tls.py [--records 100000] [--runs 2] [--quick] [--no-kafka] [--client librdkafka]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests", REPO / "tests" / "security", REPO / "bench"):
    sys.path.insert(0, str(_p))

import bench_broker  # noqa: E402
from bench_cluster import Unavailable  # noqa: E402
from bench_kafka_tools import (CONSUMER, DATA_ROW, PRODUCER, ROWS_BY_NAME, CouldNotRun, OneBroker,  # noqa: E402
                               Side, Tools, Usage)
from bench_txn_produce import SINGLE_TXN  # noqa: E402

SEGLOG, KAFKA = "seglog", "Apache Kafka"
PLAINTEXT, SASL_SSL = "PLAINTEXT", "SASL_SSL"
LISTENERS = (PLAINTEXT, SASL_SSL)
USER, PASSWORD = "bench", "bench-secret"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
RECORD = bench_broker.RECORD
PARTITIONS = bench_broker.PARTITIONS
# (client, operation): the rows of the table
CLIENTS = ("librdkafka", "Java")
ROWS = tuple((client, op) for client in CLIENTS for op in ("produce", "consume"))


def _jaas(**options: str) -> str:
    return PLAIN_MODULE + " required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


class Secrets:
    """The certificates (tests/security/pki.py) and each listener's client settings."""

    def __init__(self, folder: Path):
        try:
            from pki import STORE_PASSWORD, Pki
        except ImportError as exc:
            raise Unavailable(f"cannot make certificates: {exc}") from None
        self.pki = Pki(folder)
        self.store_password = STORE_PASSWORD
        self.java_config = folder / "sasl_ssl-client.properties"
        self.java_config.write_text("".join(f"{k}={v}\n" for k, v in {
            "security.protocol": SASL_SSL, "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": _jaas(username=USER, password=PASSWORD),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.pki.ca_pem)}.items()))

    def broker_settings(self) -> dict[str, str]:
        """The SASL_SSL listener's settings, the same keys on both brokers."""
        return {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(self.pki.broker_p12),
                "ssl.keystore.password": self.store_password, "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_ssl.plain.sasl.jaas.config":
                    _jaas(username=USER, password=PASSWORD, **{f"user_{USER}": PASSWORD})}

    def librdkafka(self, listener: str) -> dict:
        if listener == PLAINTEXT:
            return {}
        return {"security.protocol": SASL_SSL, "sasl.mechanisms": "PLAIN", "sasl.username": USER,
                "sasl.password": PASSWORD, "ssl.ca.location": str(self.pki.ca_pem)}

    def java(self, listener: str) -> Path | None:
        return None if listener == PLAINTEXT else self.java_config


class ListenerTools(Tools):
    """Kafka's tools given one listener's client properties file."""

    def __init__(self, timeout: float, config: Path | None):
        super().__init__(timeout)
        self.config = config

    def command(self, main_class: str, args: list[str]) -> list[str]:
        if self.config is not None:
            flag = {PRODUCER: "--producer.config", CONSUMER: "--consumer.config"}.get(main_class)
            if flag:
                args = [*args, flag, str(self.config)]
        return super().command(main_class, args)


class System:
    """One broker with both listeners: where each listener is, and the topics made on it."""

    def __init__(self, name: str, broker: OneBroker, addresses: dict[str, str]):
        self.name, self.addresses = name, addresses
        self.side = Side(name, broker, 1)

    def pids(self) -> list[int]:
        return self.side.cluster.pids()

    def close(self) -> None:
        self.side.cluster.close()


def start_seglog(workdir: Path, secrets: Secrets) -> System:
    ports = {name: bench_broker._free_port() for name in LISTENERS}
    extra = {"listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
             "inter.broker.listener.name": PLAINTEXT, **secrets.broker_settings()}
    # the reference Kafka broker's settings where they differ from the defaults, as bench_kafka_tools
    settings = {**SINGLE_TXN, "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
                "offsets.topic.replication.factor": "1", **extra}
    try:
        proc, _ = bench_broker.start_broker(str(workdir), settings)
    except SystemExit as exc:
        raise Unavailable(f"seglog broker did not start: {exc}") from None
    addresses = {n: f"127.0.0.1:{p}" for n, p in ports.items()}
    return System(SEGLOG, OneBroker(f"{SEGLOG} broker", proc, addresses[PLAINTEXT]), addresses)


def start_kafka(workdir: Path, secrets: Secrets) -> System:
    """Apache Kafka as bench_broker.start_apache_kafka starts it (start scripts' JVM flags, 8 I/O and
    3 network threads), its config rewritten with a SASL_SSL listener before the start."""
    try:
        from bench_spark_kafka import DefaultJvmKafka, cluster_id
        from kafka_anchor import KafkaUnavailable, resolve_jars
        from kafka_reference import free_port
    except ImportError as exc:
        raise Unavailable(f"cannot import the Kafka anchor: {exc}") from None
    threads = {"num.io.threads": "8", "num.network.threads": "3"}
    try:
        broker = DefaultJvmKafka.create(resolve_jars(), workdir / "kafka", threads, cluster_id=cluster_id())
        tls_port = free_port()
        broker.write_config({
            **threads, **secrets.broker_settings(),
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{tls_port},"
                         f"CONTROLLER://127.0.0.1:{broker.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{tls_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"})
        broker.start()
    except (KafkaUnavailable, RuntimeError, OSError) as exc:
        raise Unavailable(f"Apache Kafka did not start: {exc}") from None
    return System(KAFKA, OneBroker(f"{KAFKA} broker", broker.proc, broker.bootstrap),
                  {PLAINTEXT: broker.bootstrap, SASL_SSL: f"127.0.0.1:{tls_port}"})


def _client_cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def measure(system: System, secrets: Secrets, client: str, listener: str, args, tag: str) -> dict[str, dict]:
    """Produce then consume from the start on one listener with one client: {operation: figures}."""
    topic = f"tls-{client.lower()}-{listener.lower()}-{tag}"
    system.side.create_topic(topic, PARTITIONS)
    address = system.addresses[listener]
    mib = args.records * RECORD / (1 << 20)
    out: dict[str, dict] = {}
    tools = ListenerTools(args.timeout, secrets.java(listener)) if client == "Java" else None
    try:
        for op in ("produce", "consume"):
            usage, cpu0 = Usage(system.pids()), _client_cpu()
            try:
                if client == "Java" and op == "produce":
                    value = tools.produce(address, topic, args.records, RECORD, ROWS_BY_NAME[DATA_ROW], 100)["value"]
                elif client == "Java":
                    value = tools.consume_start(address, topic, args.records)["value"]
                elif op == "produce":
                    seconds, _ = bench_broker.produce(address, args.records, topic=topic,
                                                      client=secrets.librdkafka(listener))
                    value = mib / seconds
                else:
                    value = mib / bench_broker.consume(address, args.records, topic=topic,
                                                       client=secrets.librdkafka(listener))
            except (CouldNotRun, RuntimeError, TimeoutError) as exc:
                out[op] = {"error": str(exc)[:200]}
                if op == "produce":
                    out["consume"] = {"error": "its produce failed"}
                    break
                continue
            cpu1 = _client_cpu()
            client_cpu = cpu1[0] - cpu0[0] if client == "librdkafka" else cpu1[1] - cpu0[1]
            # after usage.finish(): its own client_cpu counts child processes only (the Java tools)
            out[op] = {"value": value, **usage.finish(), "client_cpu": client_cpu}
    finally:
        system.side.delete_topic(topic)
    return out


def run_round(systems: list[System], secrets: Secrets, args, rnd: int, results: dict) -> None:
    """Every system, client and listener once; round 0 is the warm-up (not kept)."""
    what = "warm-up" if rnd == 0 else f"round {rnd}"
    listeners = LISTENERS if rnd % 2 else LISTENERS[::-1]
    for system in (systems if rnd % 2 else systems[::-1]):
        for client in args.clients:
            for listener in listeners:
                t0 = time.monotonic()
                figures = measure(system, secrets, client, listener, args, f"r{rnd}")
                for op, fig in figures.items():
                    shown = fig.get("error") or f"{fig['value']:,.1f} MiB/s, broker CPU {fig['cpu']:.2f} s"
                    print(f"[tls] {what} {system.name} {listener} {client} {op}: {shown}", flush=True)
                    if rnd:
                        results.setdefault((system.name, listener, client, op), []).append(fig)
                print(f"[tls]   ({time.monotonic() - t0:.0f} s)", flush=True)


# ----------------------------------------------------------------------------------- report

def _ratios(results: dict, system: str, client: str, op: str) -> list[float] | None:
    """SASL_SSL / PLAINTEXT throughput per round, or None when a round has an error."""
    plain = results.get((system, PLAINTEXT, client, op), [])
    tls = results.get((system, SASL_SSL, client, op), [])
    if not plain or not tls or any("error" in r for r in plain + tls):
        return None
    return [t["value"] / p["value"] for p, t in zip(plain, tls)]


def _cpu_per_mib_ratios(results: dict, system: str, client: str, op: str) -> list[float] | None:
    """Broker CPU per MiB, SASL_SSL over PLAINTEXT, per round (throughput does not enter: the same
    bytes go through both listeners)."""
    plain = results.get((system, PLAINTEXT, client, op), [])
    tls = results.get((system, SASL_SSL, client, op), [])
    if not plain or not tls or any("error" in r for r in plain + tls):
        return None
    return [t["cpu"] / p["cpu"] if p["cpu"] else float("nan") for p, t in zip(plain, tls)]


def _span(values: list[float] | None) -> str:
    if not values:
        return "n/a"
    text = f"{statistics.median(values):.2f}"
    return text + (f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else "")


def _cell(rounds: list[dict]) -> str:
    if not rounds:
        return "not run"
    errors = [r["error"] for r in rounds if "error" in r]
    if errors:
        return f"could not run: {errors[0]}"
    return (f"{statistics.median(r['value'] for r in rounds):,.1f} MiB/s, CPU "
            f"{statistics.median(r['cpu'] for r in rounds):.2f} / {statistics.median(r['client_cpu'] for r in rounds):.2f} s")


def report(args, results: dict, systems: list[str], skipped: dict[str, str], cmdline: str) -> list[str]:
    mib = args.records * RECORD / (1 << 20)
    lines = [f"### TLS and SASL cost: SASL_SSL (SASL PLAIN, TLS) against PLAINTEXT, one broker each "
             f"({args.records:,} x {RECORD} B records = {mib:,.0f} MiB per figure, acks=all, idempotent, "
             f"{PARTITIONS} partitions; consume from offset 0)", "",
             f"`{cmdline}`; {args.runs} round(s) after a warm-up round; medians, range over the rounds. Cells: "
             f"throughput, then CPU seconds over that figure of the broker / of the client (librdkafka: this "
             f"process; Java: the tool's JVM, start included).", "",
             "| client, operation | " + " | ".join(f"{s} {listener}" for s in systems for listener in LISTENERS)
             + " | " + " | ".join(f"{s} SASL_SSL / PLAINTEXT" for s in systems)
             + (" | seglog ratio / Kafka ratio | broker CPU per MiB, SASL_SSL / PLAINTEXT: seglog ; Kafka |"
                if KAFKA in systems else " |"),
             "|---|" + "---:|" * (3 * len(systems)) + ("---:|---:|" if KAFKA in systems else "")]
    for client, op in (row for row in ROWS if row[0] in args.clients):
        cells = [_cell(results.get((s, listener, client, op), [])) for s in systems for listener in LISTENERS]
        ratios = {s: _ratios(results, s, client, op) for s in systems}
        row = f"| {client} {op} | " + " | ".join(cells) + " | " + " | ".join(_span(ratios[s]) for s in systems)
        if KAFKA in systems:
            ours, theirs = ratios[SEGLOG], ratios[KAFKA]
            against = [a / b for a, b in zip(ours, theirs)] if ours and theirs else None
            cpu = {s: _cpu_per_mib_ratios(results, s, client, op) for s in systems}
            row += f" | {_span(against)}x | {_span(cpu[SEGLOG])} ; {_span(cpu[KAFKA])}"
        lines.append(row + " |")
    lines += ["", "SASL_SSL / PLAINTEXT: the throughput kept over TLS (1.00: TLS free). seglog ratio / Kafka ratio "
              "above 1: TLS costs seglog a smaller share of its throughput than it costs Kafka. The CPU column: how "
              "much more broker CPU the same bytes took over SASL_SSL. MiB/s as Kafka's tools print them (2^20 "
              "bytes); the librdkafka figures converted to the same unit."]
    for name, reason in skipped.items():
        lines.append(f"{name}: not measured ({reason}).")
    print("\n".join(lines) + "\n", flush=True)
    return lines


QUICK = {"records": 20_000, "runs": 1}


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, help="1 KiB records per produce and consume (default 100,000)")
    parser.add_argument("--runs", type=int, help="measured rounds after the warm-up round (default 2)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for one Kafka tool run")
    parser.add_argument("--no-kafka", action="store_true", help="seglog only (no anchor)")
    parser.add_argument("--client", choices=CLIENTS, dest="clients", action="append",
                        help="measure with this client only (repeatable; default: both); more rounds of one "
                             "row then fit in the time of a default run")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['records']:,} records, {QUICK['runs']} round (options given explicitly win)")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else {"records": 100_000, "runs": 2}).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.clients = tuple(args.clients or CLIENTS)
    if args.records < 1 or args.runs < 1:
        parser.error("--records and --runs must be at least 1")
    cmdline = " ".join(["python bench/bench_tls.py", *(argv if argv is not None else sys.argv[1:])])
    results: dict = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        systems: list[System] = []
        try:
            secrets = Secrets(Path(tmp) / "pki")
            for name, start in ((SEGLOG, start_seglog), (KAFKA, start_kafka))[:1 if args.no_kafka else 2]:
                print(f"[tls] starting {name} ...", flush=True)
                (Path(tmp) / name.replace(" ", "-")).mkdir()
                try:
                    systems.append(start(Path(tmp) / name.replace(" ", "-"), secrets))
                except Unavailable as exc:
                    if name == SEGLOG:
                        raise
                    skipped[name] = str(exc)
            bench_broker.warm_client(args.records)
            for rnd in range(args.runs + 1):
                run_round(systems, secrets, args, rnd, results)
        except Unavailable as exc:
            lines = ["### TLS and SASL cost", "", f"Not measured: {exc}"]
            print("\n".join(lines), flush=True)
            return lines
        finally:
            for system in systems:
                system.close()
    return report(args, results, [s.name for s in systems], skipped, cmdline)


if __name__ == "__main__":
    main()
