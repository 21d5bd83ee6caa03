"""A log root's topics file, `seglog-topics.json`: what Kafka keeps in its controller (topic ids,
partition counts, config overrides, the root's defaults, a cluster member's broker record).

It is replaced only with conditional writes (`TopicsFile.update`), so that concurrent admin calls
cannot lose each other's changes. Credentials never stay in it: those an earlier seglog stored
there are taken out on read and kept in memory (`TopicsFile.secrets`).
"""
from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from logcore.errors import CommitFailedError, NotALogRootError
from logcore.storage.secrets import split_secrets

logger = logging.getLogger(__name__)

TOPICS_FILE = "seglog-topics.json"


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    # The partitions this root holds replicas of (a cluster member's log dir, which holds only
    # the replicas assigned to its broker); None: every partition (a single broker's root).
    hosted: tuple[int, ...] | None = None


def topic_info(name: str, t: dict) -> TopicInfo:
    """A topic's entry of the topics file (or of a Kafka copy's folder listing) as a TopicInfo."""
    hosted = t.get("hosted")
    return TopicInfo(name, t.get("topic_id", ""), int(t["partitions"]), dict(t.get("config", {})),
                     None if hosted is None else tuple(sorted(int(p) for p in hosted)))


class TopicsFile:
    """The topics file of the root in `storage`. read_only: credentials found in it are used but
    left in place (a writable root rewrites the file without them, once)."""

    def __init__(self, storage, *, read_only: bool):
        self.storage = storage
        self.read_only = read_only
        self.secrets: dict[str, str] = {}   # credentials taken out of the stored defaults
        self._migrating = False             # credentials found in the file: handled once

    def create(self, stored_defaults: dict[str, str]) -> str:
        """Write a new topics file with a new cluster id unless one exists (a concurrent
        creator's stands); the cluster id of the file that stands."""
        doc = {"version": 1, "cluster_id": _new_id(), "defaults": stored_defaults, "topics": {}}
        if self.storage.put_if_absent(TOPICS_FILE, _dump(doc)) is not None:
            return doc["cluster_id"]
        return str(json.loads(self.storage.read(TOPICS_FILE)).get("cluster_id", ""))

    def read(self) -> tuple[dict, str | None]:
        """The document and its version (None: no file yet, an empty document)."""
        found = self.storage.read_versioned(TOPICS_FILE)
        if found is None:
            return {"version": 1, "defaults": {}, "topics": {}}, None
        data, version = found
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise NotALogRootError(f"{self.storage.url}/{TOPICS_FILE} is not valid JSON: {exc}") from exc
        if not isinstance(doc, dict) or "topics" not in doc:
            raise NotALogRootError(f"{self.storage.url}/{TOPICS_FILE} has no topics table")
        if doc.get("defaults"):
            self._take_secrets(doc)
        return doc, version

    def update(self, change):
        """Read-modify-write with a conditional replace, retried on a lost race: `change(doc)`
        edits the document in place (or raises to abort); what it returns is returned."""
        for _ in range(50):
            doc, version = self.read()
            result = change(doc)
            data = _dump(doc)
            new = (self.storage.put_if_absent(TOPICS_FILE, data) if version is None
                   else self.storage.put_if_version(TOPICS_FILE, data, version))
            if new is not None:
                return result
            time.sleep(0.01)
        raise CommitFailedError(f"could not update {TOPICS_FILE}: too many concurrent changes")

    def _take_secrets(self, doc: dict) -> None:
        """A root written by an earlier seglog may hold credentials in its stored defaults
        (rsm.config.storage.key/secret, a URL with user:password@): keep them in memory for this
        process, drop them from `doc`, and, when the root is writable, rewrite the topics file
        without them (once, with a warning naming the settings, never their values)."""
        public, private = split_secrets(dict(doc.get("defaults", {})))
        if not private:
            return
        doc["defaults"] = public
        for name, value in private.items():
            self.secrets.setdefault(name, value)
        if self._migrating:
            return
        self._migrating = True
        names = ", ".join(sorted(private))
        if self.read_only:
            logger.warning("%s/%s holds credentials (%s): they are used but left in place (the root"
                           " is opened read-only); open it once for writing to remove them, and"
                           " keep them in the broker's config or the environment instead",
                           self.storage.url, TOPICS_FILE, names)
            return
        self.update(lambda _doc: None)         # read() gives it without them
        logger.warning("%s/%s held credentials (%s): removed from the root's files and kept in"
                       " memory for this process; give them in the broker's config (or"
                       " --config-file), the environment or a referenced file from now on",
                       self.storage.url, TOPICS_FILE, names)


def _dump(doc: dict) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode()


def _new_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
