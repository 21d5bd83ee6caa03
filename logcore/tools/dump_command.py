"""`seglog dump`: print segment, index, snapshot and checkpoint files, local or remote
(Kafka's DumpLogSegments).
"""
from __future__ import annotations

import sys

from logcore.errors import InvalidConfigError
from logcore.tools.arguments import parse_storage_options
from logcore.tools.dump import DumpOptions, dump_files
from logcore.tools.tiered_command import _open_tiered_root


def cmd_dump(args) -> int:
    options = DumpOptions(print_data_log=args.print_data_log, deep_iteration=args.deep_iteration,
                          verify_index_only=args.verify_index_only, index_sanity_check=args.index_sanity_check,
                          max_message_size=args.max_message_size, max_bytes=args.max_bytes,
                          skip_record_metadata=args.skip_record_metadata)
    if args.remote:
        if args.files or not args.root or not args.topic:
            raise InvalidConfigError("--remote needs --root and --topic (and no --files)")
        from logcore.tools.remote_segments import dump_remote
        root = _open_tiered_root(args)
        try:
            partitions = [args.partition] if args.partition is not None else None
            return dump_remote(root, args.topic, partitions, args.offset, options, sys.stdout, sys.stderr)
        finally:
            root.close()
    if not args.files:
        raise InvalidConfigError("give --files, or --remote with --root and --topic")
    files = [f for item in args.files for f in item.split(",") if f]
    return dump_files(files, options, sys.stdout, sys.stderr, parse_storage_options(args.storage_option))
