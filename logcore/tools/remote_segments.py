"""The command line's view of the remote tier: `seglog tiered --list` and `seglog dump --remote`.

Both open the root's remote tier from its settings (remote.log.storage.system.enable and
rsm.config.*, stored with the root's defaults or given in a properties file) and read the
partition's remote log metadata, so they need no broker and work in every RSM mode: `dump`
fetches a segment's files through the remote storage manager (decrypting and decompressing
chunks when the segment is transformed) into a temporary folder under Kafka's names and dumps
them like local files.
"""
from __future__ import annotations

import os
import tempfile
from datetime import datetime, timezone
from typing import TextIO

from logcore.errors import InvalidConfigError, RemoteResourceNotFoundError
from logcore.log.log_root import LogRoot
from logcore.tiered.fsspec_rsm import index_file_name, segment_folder
from logcore.tiered.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from logcore.tiered.remote_log import RemoteTier
from logcore.tiered.rsm import IndexType, SegmentCustomMetadata
from logcore.tools.dump import Dumper, DumpOptions

_COPY_BLOCK = 8 * 1024 * 1024


def open_tier(root: LogRoot) -> RemoteTier:
    tier = root.remote_tier()
    if tier is None:
        raise InvalidConfigError(
            f"{root.url} does not enable tiered storage: set remote.log.storage.system.enable=true "
            "and rsm.config.storage.url in the root's defaults, or give them with --config-file")
    return tier


def remote_segments(root: LogRoot, topic: str, partitions: list[int] | None = None, *,
                    all_states: bool = False) -> list[tuple[int, RemoteLogSegmentMetadata]]:
    """(partition, metadata) of the topic's remote segments: finished ones, or every attempt."""
    info = root.describe_topic(topic)
    tier = open_tier(root)
    wanted = partitions if partitions is not None else list(range(info.partitions))
    found = []
    for p in wanted:
        if not 0 <= p < info.partitions:
            raise InvalidConfigError(f"--partition {p}: topic {topic} has partitions 0..{info.partitions - 1}")
        store = tier.store(topic, info.topic_id, p)
        store.refresh()
        state = None if all_states else RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        found.extend((p, m) for m in store.list_segments(state))
    return found


def _time(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def segment_rows(segments: list[tuple[int, RemoteLogSegmentMetadata]]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    header = ("partition", "segment id", "state", "start offset", "end offset", "size bytes",
              "max timestamp", "event time", "mode")
    rows = []
    for p, m in segments:
        custom = SegmentCustomMetadata.from_bytes(m.custom_metadata)
        mode = "-" if custom is None else ("transformed" if custom.transformed else "plain")
        rows.append((str(p), m.segment_id.text, m.state.name, str(m.start_offset), str(m.end_offset),
                     str(m.segment_size_in_bytes), _time(m.max_timestamp_ms), _time(m.event_timestamp_ms),
                     mode))
    return header, rows


def print_segments(segments: list[tuple[int, RemoteLogSegmentMetadata]], out: TextIO, *,
                   rich: bool, title: str) -> None:
    header, rows = segment_rows(segments)
    if rich:
        from rich.console import Console
        from rich.table import Table

        table = Table(*header, title=title)
        for row in rows:
            table.add_row(*row)
        Console(file=out).print(table)
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        for row in (header, *rows):
            out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
    total = sum(m.segment_size_in_bytes for _p, m in segments)
    out.write(f"{len(segments)} remote segments, {total} bytes\n")
    out.flush()


def dump_remote(root: LogRoot, topic: str, partitions: list[int] | None, offset: int | None,
                options: DumpOptions, out: TextIO, err: TextIO) -> int:
    """Dump the remote segments of a topic (or the one holding `offset`) with their indexes."""
    tier = open_tier(root)
    segments = [(p, m) for p, m in remote_segments(root, topic, partitions)
                if offset is None or m.start_offset <= offset <= m.end_offset]
    if not segments:
        where = f" holding offset {offset}" if offset is not None else ""
        raise RemoteResourceNotFoundError(f"topic {topic} has no remote segment{where}")
    status = 0
    for p, meta in segments:
        with tempfile.TemporaryDirectory(prefix="seglog-remote-") as tmp:
            names = _fetch_segment(tier, meta, tmp)
            display = f"{tier.rsm.storage.url}/{segment_folder(meta)}"
            out.write(f"Remote segment {meta.segment_id} of {topic}-{p}: offsets "
                      f"{meta.start_offset}-{meta.end_offset}, {meta.segment_size_in_bytes} bytes\n")
            dumper = _DisplayDumper(options, out, err, display, tmp)
            status = max(status, dumper.dump([os.path.join(tmp, n) for n in names]))
    return status


def _fetch_segment(tier: RemoteTier, meta: RemoteLogSegmentMetadata, folder: str) -> list[str]:
    """Write the segment's original files into `folder` under Kafka's names; returns the names."""
    rsm = tier.rsm
    log_name = f"{meta.start_offset:020d}.log"
    with rsm.fetch_log_segment(meta, 0) as stream, open(os.path.join(folder, log_name), "wb") as f:
        while block := stream.read(_COPY_BLOCK):
            f.write(block)
    names = [log_name]
    for index_type in (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION,
                       IndexType.PRODUCER_SNAPSHOT, IndexType.LEADER_EPOCH):
        try:
            data = rsm.fetch_index(meta, index_type)
        except RemoteResourceNotFoundError:
            continue
        name = index_file_name(meta, index_type)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        if data:
            names.append(name)
    return names


class _DisplayDumper(Dumper):
    """Prints the remote folder instead of the temporary one the files were fetched into."""

    def __init__(self, options: DumpOptions, out: TextIO, err: TextIO, display: str, tmp: str):
        super().__init__(options, out, err)
        self._display = display
        self._tmp = tmp

    def dump(self, paths: list[str]) -> int:
        out = self.out
        self.out = _Rewriting(out, self._tmp, self._display)
        try:
            return super().dump(paths)
        finally:
            self.out = out


class _Rewriting:
    """A text stream that prints `display` wherever `tmp` would appear."""

    def __init__(self, out: TextIO, tmp: str, display: str):
        self._out, self._tmp, self._display = out, tmp, display

    def write(self, text: str) -> int:
        return self._out.write(text.replace(self._tmp, self._display))

    def flush(self) -> None:
        self._out.flush()
