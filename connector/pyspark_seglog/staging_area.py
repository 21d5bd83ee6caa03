"""The sink's staging area in a root: `<root>/.seglog-staging/<query>/<batch>/...`.

Tasks stage parts there (task_stager.py); the driver's commit pins a batch's manifest there,
records the last committed batch of a streaming query (`_committed.json`), and deletes the
staging of committed and aborted batches (docs/sink-protocol.md).
"""
from __future__ import annotations

import json

STAGING_DIR = ".seglog-staging"
MANIFEST = "_manifest.json"
COMMITTED = "_committed.json"
# A batch job's staging folder holds this from planning until its commit or abort ends the job:
# a task attempt that finishes staging when it is gone (a straggler of an aborted job, a zombie
# of a committed one) removes what it staged itself, since no commit or abort will.
JOB_MARKER = "_job"


def staging_path(query_id: str, batch_id: int | None = None) -> str:
    """The staging folder of a query (or batch job), or of one of its batches."""
    base = f"{STAGING_DIR}/{query_id}"
    return base if batch_id is None else f"{base}/{batch_id}"


def read_json(storage, path: str):
    if not storage.exists(path):
        return None
    return json.loads(storage.read(path))


def end_job(storage, job_id: str) -> None:
    """Remove a batch job's marker, before its staging is swept (see JOB_MARKER)."""
    storage.delete(f"{staging_path(job_id)}/{JOB_MARKER}", missing_ok=True)


def cleanup(storage, query_id: str, batch_id: int) -> None:
    """Delete the staging of this batch and of every older batch of the query, and what a
    driver killed while it wrote `_committed.json` left beside it (the one driver of the query
    has finished its own write by now)."""
    base = staging_path(query_id)
    if not storage.exists(base):
        return
    storage.delete_abandoned_writes(base)
    for name in storage.list_dir(base):
        if name.isdigit() and int(name) <= batch_id:
            storage.delete_dir(f"{base}/{name}")
    if not any(n.isdigit() for n in storage.list_dir(base)) and not storage.exists(f"{base}/{COMMITTED}"):
        storage.delete_dir(base)


def held_epochs(committed: dict | None) -> dict[tuple[str, int], tuple[int, str]]:
    """`_committed.json`'s "epochs": [[topic, partition, epoch, writer id], ...] (none in files
    written before it was recorded, and for a query's first batch)."""
    if committed is None:
        return {}
    return {(str(topic), int(p)): (int(epoch), str(writer))
            for topic, p, epoch, writer in committed.get("epochs", [])}
