"""The `staging.publish=multipart` policy of a batch job on an object store: a task uploads each
part whose offsets it reserved (offset_reservation.py) as a multipart upload of the part's final
segment object, `<topic>-<partition>/<base offset>.log`, and the driver's commit completes the
uploads with If-None-Match instead of copying staged objects (docs/sink-protocol.md, "Parts
uploaded as their segments").

An upload not completed is invisible to readers, so a failed or zombie attempt never puts bytes
into a log. Its cost: a part cannot be read back to be re-stamped, so a partition that another
writer took or appended to during the job fails the commit before any upload is completed. Who
aborts the uploads: a task attempt that fails aborts its own; the commit (whatever its outcome)
and the job's abort abort those their messages name; and each commit, holding its partitions,
aborts every other upload under them that it listed before taking them (killed attempts,
crashed drivers): those were started before its take, so they carry an epoch no later commit can
hold, and could never be completed.
"""
from __future__ import annotations

import logging
import re

from logcore.errors import CommitFailedError, InvalidConfigError, SegLogError
from logcore.log.log_root import partition_dir
from logcore.log.segment_names import LOG_SUFFIX, segment_name

from pyspark_seglog.publish_pool import run_each, shared_publish_pool

logger = logging.getLogger("pyspark_seglog.sink")

COPY, MULTIPART = "copy", "multipart"
_PROBE = "_conditional-complete-probe"
_SEGMENT_LOG = re.compile(r"^(.*)-(\d+)/\d{20}" + re.escape(LOG_SUFFIX) + "$")


def upload_key(topic: str, partition: int, base: int) -> str:
    """The segment object a part whose first offset is `base` becomes."""
    return f"{partition_dir(topic, partition)}/{segment_name(base, LOG_SUFFIX)}"


def check_store(storage, folder: str) -> None:
    """Planning: refuse the policy where it cannot hold, with the reason: a store without
    uploads, or one that completes an upload over an existing object despite If-None-Match
    (tried on a probe object in the job's staging `folder`)."""
    if storage.is_local:
        raise InvalidConfigError(
            f"option staging.publish=multipart: {storage.url} is on local disk, where the commit"
            " already makes staged parts segments without copying them; use staging.publish=copy")
    if not storage.conditional_uploads:
        raise InvalidConfigError(
            f"option staging.publish=multipart: {storage.url} has no multipart uploads that a commit"
            " can complete with If-None-Match (S3 only); use staging.publish=copy")
    probe = f"{folder}/{_PROBE}"
    uploads = []
    try:
        for _ in range(2):
            uploads.append(storage.start_upload(probe))
            etag = storage.upload_part(probe, uploads[-1], b"probe")
            completed = storage.complete_upload_if_absent(probe, uploads[-1], etag)
            if len(uploads) == 1 and not completed:
                raise InvalidConfigError(
                    f"option staging.publish=multipart: {storage.describe(probe)} could not be created by"
                    " a conditional complete; use staging.publish=copy")
        if completed:
            raise InvalidConfigError(
                f"option staging.publish=multipart: {storage.url} completed an upload over an existing"
                " object despite If-None-Match, so two commits could both publish a segment; use"
                " staging.publish=copy")
    except InvalidConfigError:
        raise
    except SegLogError as exc:
        raise InvalidConfigError(
            f"option staging.publish=multipart: {storage.url} refused a conditional multipart upload"
            f" of {storage.describe(probe)} ({exc}); use staging.publish=copy") from exc
    finally:
        for upload in uploads:
            storage.abort_upload(probe, upload)
        storage.delete(probe, missing_ok=True)


def uploaded(parts: list) -> list:
    """The parts that are uploads of their segments (the others were staged as objects)."""
    return [p for p in parts if p.upload_id is not None]


def check_publishable(logs: dict, by_partition: dict) -> None:
    """Commit, every partition taken: raise CommitFailedError naming each partition whose
    uploaded parts cannot become segments as they are, before any upload is completed."""
    refused = []
    for tp, log in sorted(logs.items()):
        parts = sorted(uploaded(by_partition[tp]), key=lambda p: p.base)
        if not parts:
            continue
        epochs = {p.epoch for p in parts}
        why = log.staged_objects_refusal([p.fields() for p in parts])
        if why is None and epochs != {log.leader_epoch}:
            why = (f"another writer took it during this job (its writer epoch is now {log.leader_epoch};"
                   f" this job's parts were stamped for epoch {max(epochs)})")
        if why is not None:
            refused.append(f"{tp[0]}-{tp[1]}: {why}")
    if refused:
        raise CommitFailedError(
            "staging.publish=multipart: the job's parts cannot be published as uploaded: "
            + "; ".join(refused) + ". An uploaded part cannot be read back and given new offsets, so"
            " nothing was published and the job's uploads are aborted; write again, or use"
            " staging.publish=copy (the default), which appends such parts after the other writer's")


def publish(storage, log, parts: list) -> None:
    """Complete the uploads of one partition's parts as its segments, in offset order (not
    committed: the HW moves with the commit)."""
    ordered = sorted(parts, key=lambda p: p.base)
    by_key = {p.upload_key: p for p in ordered}

    def complete(part, path: str) -> bool:
        if path != part.upload_key or by_key.get(path) is not part:
            raise SegLogError(f"part uploaded as {part.upload_key} would become segment {path}")
        return storage.complete_upload_if_absent(path, part.upload_id, part.etag)

    if log.publish_staged_objects([(p, p.fields().copy()) for p in ordered], complete) is None:
        # check_publishable found nothing wrong, and the partition is held since
        raise CommitFailedError(f"{log.topic}-{log.partition}: {log.staged_objects_refusal([p.fields() for p in ordered])}")


def ids(parts: list) -> list[tuple[str, str]]:
    """(key, upload id) of the parts that are uploads."""
    return [(p.upload_key, p.upload_id) for p in uploaded(parts)]


def abort(storage, uploads: list[tuple[str, str]]) -> None:
    """Abort these uploads, (key, upload id) each, at the same time (a completed one is left as
    it is). Best effort: this runs on failure paths, and the next commit on these partitions
    aborts what is left (`others`)."""
    calls = [(storage.abort_upload, key, upload) for key, upload in uploads]
    for (_call, key, _id), error in zip(calls, run_each(shared_publish_pool(), calls)):
        if error is not None:
            logger.warning("seglog sink: could not abort the upload of %s: %s", key, error)


def others(storage, topic: str, partitions: set[int], ours: set[str]) -> list[tuple[str, str]]:
    """(key, upload id) of the segment uploads under `topic`'s `partitions` not in `ours`. Listed
    before the commit takes the partitions, they were all started before that take: once it
    holds them, the commit aborts them (none can be completed by a commit any more)."""
    found = []
    for key, upload in storage.list_uploads(f"{topic}-"):
        m = _SEGMENT_LOG.match(key)
        if m and m.group(1) == topic and int(m.group(2)) in partitions and upload not in ours:
            found.append((key, upload))
    return found
