"""Where a task reads its records from: the option `readFrom`, a named policy.

- `files`: the log's files (the root, or a replica's log dir on the task's host first:
  partition_reader.py). A task that cannot open them fails.
- `brokers`: Fetch through `kafka.bootstrap.servers` (broker_reader.py); the driver plans
  through the brokers too (ListOffsets, Metadata), so no log dir is needed anywhere.
- `auto` (the default): the files when the task can open them, else the brokers (when
  `kafka.bootstrap.servers` is given). Without a `path`, auto reads through the brokers.

Local files stay the fast path: a task on a host that sees the log dir reads it directly.
"""
from __future__ import annotations

import logging

from logcore.errors import InvalidConfigError, SegLogError

logger = logging.getLogger("pyspark_seglog.source")

READ_PATH_OPTION = "readFrom"


class FilesPath:
    name = "files"

    @staticmethod
    def read(p):
        from pyspark_seglog.partition_reader import open_files, read_files
        return read_files(p, *open_files(p))


class BrokersPath:
    name = "brokers"

    @staticmethod
    def read(p):
        from pyspark_seglog.broker_reader import read_through_brokers
        return read_through_brokers(p)


class AutoPath:
    name = "auto"

    @staticmethod
    def read(p):
        from pyspark_seglog.partition_reader import open_files, read_files
        if not p.root or p.bootstrap_servers is None:
            return BrokersPath.read(p) if not p.root else FilesPath.read(p)
        try:
            opened = open_files(p)
        except (SegLogError, OSError) as exc:
            logger.info("%s-%d [%d, %d): the log's files are not readable here (%s); fetching through"
                        " the brokers at kafka.bootstrap.servers=%s", p.topic, p.partition, p.start,
                        p.until, exc, p.bootstrap_servers)
            return BrokersPath.read(p)
        return read_files(p, *opened)


READ_PATHS = {policy.name: policy for policy in (AutoPath, FilesPath, BrokersPath)}


def parse_read_path(raw, *, has_root: bool, has_bootstrap: bool) -> str:
    """The readFrom option checked against path and kafka.bootstrap.servers."""
    name = "auto" if raw is None else str(raw).strip().lower()
    if name not in READ_PATHS:
        raise InvalidConfigError(f"option {READ_PATH_OPTION}={raw!r}: must be auto, files or brokers")
    if name == "files" and not has_root:
        raise InvalidConfigError(
            f"option {READ_PATH_OPTION}=files needs the log root: give it as load(path) or the option path")
    if name in ("brokers", "auto") and not has_root and not has_bootstrap:
        raise InvalidConfigError(
            "no log root and no brokers: give the log root as load(path) / the option path (a local"
            " folder or s3://bucket/prefix), or kafka.bootstrap.servers to read through the brokers")
    if name == "brokers" and not has_bootstrap:
        raise InvalidConfigError(
            f"option {READ_PATH_OPTION}=brokers needs kafka.bootstrap.servers (host:port of the brokers)")
    if name == "brokers" and has_root:
        raise InvalidConfigError(
            f"option {READ_PATH_OPTION}=brokers reads nothing from a log root: leave out path (load()"
            f" without a path), or use {READ_PATH_OPTION}=auto to read the files where they are visible")
    return name
