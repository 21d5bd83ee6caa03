"""`seglog tiered`: list a topic's remote (tiered) segments."""
from __future__ import annotations

import sys

from logcore.errors import InvalidConfigError
from logcore.log.properties_file import load_properties
from logcore.tools.arguments import _properties_file, parse_storage_options


def _open_tiered_root(args):
    """The root read-only, with tiered-storage settings from --config-file over its own."""
    from logcore.log.log_root import LogRoot

    props = load_properties(_properties_file(args.config_file, "--config-file")) if args.config_file else {}
    return LogRoot.open(args.root, storage_options=parse_storage_options(args.storage_option),
                        read_only=True, defaults=props)


def cmd_tiered(args) -> int:
    from logcore.tools.remote_segments import print_segments, remote_segments

    segment = getattr(args, "segment", None)
    if not args.list and segment is None:
        raise InvalidConfigError("seglog tiered: give --list or --segment ID|OFFSET")
    root = _open_tiered_root(args)
    try:
        partitions = [args.partition] if args.partition is not None else None
        segments = remote_segments(root, args.topic, partitions, all_states=args.all_states)
        if segment is not None:
            _print_segment_objects(root, args.topic, segments, segment, sys.stdout)
        else:
            print_segments(segments, sys.stdout, rich=sys.stdout.isatty(),
                           title=f"remote segments of {args.topic}")
    finally:
        root.close()
    return 0


def _print_segment_objects(root, topic: str, segments, wanted: str, out) -> None:
    """The objects one remote segment is stored as (from its manifest): name, stored size and,
    for plain objects, that they are Kafka's own files (a copy out of the bucket reads with
    kafka-dump-log as is)."""
    from logcore.errors import RemoteResourceNotFoundError
    from logcore.tiered.fsspec_rsm import segment_folder
    from logcore.tiered.metadata import RemoteLogSegmentState
    from logcore.tools.remote_segments import open_tier

    finished = [(p, m) for p, m in segments if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    if wanted.isdigit():
        found = [(p, m) for p, m in finished if m.start_offset <= int(wanted) <= m.end_offset]
    else:
        found = [(p, m) for p, m in finished if m.segment_id.text == wanted]
    if not found:
        raise RemoteResourceNotFoundError(
            f"topic {topic} has no finished remote segment {wanted!r} (a segment id, or an offset it holds)")
    tier = open_tier(root)
    for p, meta in found:
        manifest = tier.rsm.load_manifest(meta)
        folder = segment_folder(meta)
        out.write(f"remote segment {meta.segment_id.text} of {topic}-{p}: offsets {meta.start_offset}-"
                  f"{meta.end_offset}, {meta.segment_size_in_bytes} bytes, "
                  f"{'transformed' if manifest.log_transformed else 'plain (Kafka files)'}\n")
        out.write(f"  at {tier.rsm.storage.describe(folder)}/\n")
        rows = [(manifest.log_object, manifest.chunk_index.stored_file_size,
                 manifest.chunk_index.original_file_size)]
        rows += [(e.object, e.size, None) for e in manifest.indexes.values() if e is not None]
        for name, stored, original in rows:
            extra = f" (original {original})" if original is not None and original != stored else ""
            out.write(f"  {name:<40} {stored:>12} bytes{extra}\n")
    out.flush()
