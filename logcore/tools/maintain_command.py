"""`seglog maintain`: retention, compaction and tiering of a root, once or as a service, and
the report of what each pass did.
"""
from __future__ import annotations

import sys
from typing import TextIO

from logcore.errors import InvalidConfigError
from logcore.log.properties_file import load_properties
from logcore.tools.arguments import _properties_file, parse_storage_options


def cmd_maintain(args) -> int:
    import signal
    import threading

    from logcore.log.config import MaintenanceConfig
    from logcore.log.log_root import LogRoot
    from logcore.maintenance.service import MaintenanceService  # registers the remote tier too

    props = load_properties(_properties_file(args.config_file, "--config-file")) if args.config_file else {}
    try:
        MaintenanceConfig.from_props(props)         # a bad file fails before anything is opened
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{args.config_file}: {exc}") from None
    root = LogRoot.open(args.root, storage_options=parse_storage_options(args.storage_option),
                        defaults=props)
    try:
        if root.read_only:
            raise InvalidConfigError(f"{root.url} is read-only (a copy of a Kafka log dir?): "
                                     "nothing can be deleted there")
        owner = root.served_by()
        if owner is not None:
            from logcore.log.root_owner import served_error
            raise served_error(root.url, owner, "seglog maintain",
                               "the broker applies retention and compaction to its root itself"
                               " (log.retention.check.interval.ms)")
        tier = root.remote_tier()                   # bad tiered storage settings fail now,
        if tier is not None:
            tier.check_access()                     # and so does a remote root we cannot write
        service = MaintenanceService(root, MaintenanceConfig.from_props(root.defaults()))
        topics = args.topic or None
        service.partitions(topics)                  # unknown topics fail now
        report = _MaintainReport(sys.stdout, sys.stderr)
        if args.once:
            summary = report.run(lambda progress: service.run_once(topics, progress=progress))
            report.summary(summary)
            return 0
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        sys.stderr.write(f"seglog maintain: checking {root.url} every "
                         f"{service.settings.retention_check_interval_ms} ms; Ctrl-C stops\n")
        try:
            passes = service.run_forever(stop, topics, on_pass=report.summary,
                                         progress=report.plain_progress)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        sys.stderr.write(f"seglog maintain: stopped after {passes} passes\n")
        return 0
    finally:
        root.close()


class _MaintainReport:
    """Progress while a pass runs and a table of what it deleted: rich on a terminal, plain
    lines otherwise (logs, pipes, tests)."""

    def __init__(self, out: TextIO, err: TextIO):
        self.out = out
        self.err = err
        self.rich = out.isatty() and err.isatty()

    def plain_progress(self, done: int, total: int, outcome) -> None:
        name = f"{outcome.topic}-{outcome.partition}"
        if outcome.skipped is not None:
            self.err.write(f"[{done}/{total}] {name}: skipped: {outcome.skipped}\n")
        else:
            did = []
            if outcome.segments_deleted:
                did.append(f"deleted {outcome.segments_deleted} segments ({outcome.bytes_deleted} bytes),"
                           f" log start offset now {outcome.log_start_offset}")
            t = outcome.tiering
            if t is not None and (t.segments_copied or t.remote_segments_deleted or t.error):
                did.append(f"copied {t.segments_copied} segments ({t.bytes_copied} bytes) to the remote tier,"
                           f" expired {t.remote_segments_deleted} remote segments"
                           f" ({t.remote_bytes_deleted} bytes)" + (f", error: {t.error}" if t.error else ""))
            if outcome.cleaned is not None:
                c = outcome.cleaned
                did.append(f"cleaned {c.bytes_read} bytes to {c.bytes_written}"
                           f" ({c.records_read - c.records_kept} records removed,"
                           f" {c.segments_before} segments to {c.segments_after})")
            self.err.write(f"[{done}/{total}] {name}: {'; '.join(did) or 'nothing to do'}\n")
        self.err.flush()

    def run(self, work):
        if not self.rich:
            return work(self.plain_progress)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=Console(file=self.err), transient=True) as bar:
            task = bar.add_task("maintain", total=None)

            def progress(done: int, total: int, outcome) -> None:
                bar.update(task, completed=done, total=total,
                           description=f"{outcome.topic}-{outcome.partition}")

            return work(progress)

    def summary(self, summary) -> None:
        rows = []
        for topic, outcomes in sorted(summary.by_topic().items()):
            starts = ",".join(f"{o.partition}:{o.log_start_offset}" for o in outcomes
                              if o.skipped is None)
            skipped = ",".join(str(o.partition) for o in outcomes if o.skipped is not None)
            cleaned = [o.cleaned for o in outcomes if o.cleaned is not None]
            tiering = [o.tiering for o in outcomes if o.tiering is not None]
            rows.append((topic, str(len(outcomes)), str(sum(o.segments_deleted for o in outcomes)),
                         str(sum(o.bytes_deleted for o in outcomes)),
                         str(sum(o.files_removed for o in outcomes)), starts or "-",
                         str(sum(c.bytes_read for c in cleaned)),
                         str(sum(c.records_read - c.records_kept for c in cleaned)),
                         skipped or "-",
                         str(sum(t.segments_copied for t in tiering)) if tiering else "-",
                         str(sum(t.remote_segments_deleted for t in tiering)) if tiering else "-"))
        header = ("topic", "partitions", "segments deleted", "bytes deleted", "files removed",
                  "log start offsets", "bytes cleaned", "records compacted away", "skipped partitions",
                  "segments copied", "remote segments expired")
        if self.rich:
            from rich.console import Console
            from rich.table import Table

            table = Table(*header, title="seglog maintain")
            for row in rows:
                table.add_row(*row)
            Console(file=self.out).print(table)
        else:
            widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
                      for i, h in enumerate(header)]
            for row in (header, *rows):
                self.out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
            self.out.write(f"total: {summary.segments_deleted} segments, "
                           f"{summary.bytes_deleted} bytes deleted; "
                           f"{len(summary.cleaned)} partitions cleaned; "
                           f"{len(summary.skipped)} partitions skipped\n")
        self.out.flush()
