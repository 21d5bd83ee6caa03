"""`seglog tiered`: list a topic's remote (tiered) segments."""
from __future__ import annotations

import sys

from logcore.errors import InvalidConfigError
from logcore.log.config import load_properties
from logcore.tools.arguments import _properties_file, parse_storage_options


def _open_tiered_root(args):
    """The root read-only, with tiered-storage settings from --config-file over its own."""
    from logcore.log.log_root import LogRoot

    props = load_properties(_properties_file(args.config_file, "--config-file")) if args.config_file else {}
    return LogRoot.open(args.root, storage_options=parse_storage_options(args.storage_option),
                        read_only=True, defaults=props)


def cmd_tiered(args) -> int:
    from logcore.tools.remote_segments import print_segments, remote_segments

    if not args.list:
        raise InvalidConfigError("seglog tiered: give --list")
    root = _open_tiered_root(args)
    try:
        partitions = [args.partition] if args.partition is not None else None
        segments = remote_segments(root, args.topic, partitions, all_states=args.all_states)
        print_segments(segments, sys.stdout, rich=sys.stdout.isatty(),
                       title=f"remote segments of {args.topic}")
    finally:
        root.close()
    return 0
