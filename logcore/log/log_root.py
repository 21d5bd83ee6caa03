"""A log root: topics and their partitions in one folder or bucket prefix.

The root is self-describing: its topics file (topics_file.py) holds what Kafka keeps in its
controller. A copy of a Kafka broker's log dir (no topics file, but `<topic>-<partition>` folders
and Kafka's checkpoints; kafka_log_dir.py) opens read-only.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable

from logcore.errors import (InvalidConfigError, NotALogRootError, ReadOnlyLogError,
                            ReplicaNotAvailableError, SegLogError, TopicExistsError, TopicNotFoundError)
from logcore.log.config import (ROOT_TIERING_ENABLE, LogConfig, check_topic_against_root, root_tiering_enabled,
                               validate_topic_overrides)
from logcore.log.topic_name import validate_topic_name
from logcore.log.log import Log
from logcore.log.log_loader import KAFKA_CLEAN_SHUTDOWN
from logcore.log.log_backend import LogBackend
from logcore.log.segment_store import LocalSegmentStore, ObjectSegmentStore
from logcore.log.open_mode import (KafkaCopyReader, OpenMode, PathWriter, PlainReader, RangeReader,
                                   RepairWriter, ReplicaWriter)
from logcore.log.remote_view import RemoteTier, RemoteTierFactory, registered_remote_tier
from logcore.log.kafka_log_dir import META_PROPERTIES, kafka_topics, looks_like_kafka_log_dir
from logcore.log.partition_metadata import FILE_NAME as PARTITION_METADATA
from logcore.log.partition_metadata import (PartitionMetadataFile, format_topic_id, new_topic_id,
                                           parse_topic_id)
from logcore.log.partition_state import LocalPartitionState, ObjectPartitionState
from logcore.log.topics_file import TOPICS_FILE, TopicInfo, TopicsFile, topic_info
from logcore.log.writer_fence import WriterFence
from logcore.storage import open_storage
from logcore.storage.secrets import split_secrets

logger = logging.getLogger(__name__)


def partition_dir(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def load_remote_tier() -> RemoteTierFactory:
    """The registered remote tier factory. The layers above that use tiering (the broker, the
    tools, the connector, the maintenance service) register it by importing `logcore.tiered`;
    the log layer never imports it. The factory checks the root's tiered settings, naming any
    bad one."""
    factory = registered_remote_tier()
    if factory is None:
        raise InvalidConfigError(
            f"this root sets {ROOT_TIERING_ENABLE}=true but no remote tier is registered in this"
            " process: import logcore.tiered (it registers itself through"
            " logcore.log.remote_view.register_remote_tier) before opening the root")
    return factory


class LogRoot:
    """Topics and partitions of one root. Open with `LogRoot.open(url)`."""

    def __init__(self, storage, *, kafka_copy: bool, defaults: dict[str, str] | None = None,
                 url: str | None = None, storage_options: dict | None = None):
        self.storage = storage
        self._url = url
        self._storage_options = storage_options
        self._reader_storage = storage if storage.read_only else None
        self.kafka_copy = kafka_copy
        self.read_only = storage.read_only or kafka_copy
        self._open_logs: list[Log] = []
        self._defaults_override = dict(defaults or {})
        self._dynamic_defaults: dict[str, str] = {}
        self._remote_tier = None            # built on first need from the root's settings
        self._remote_tier_lock = threading.Lock()
        self.topics_file = TopicsFile(storage, read_only=self.read_only)
        # The id of this process's claim when it serves the root (a broker): its own writes pass
        # check_not_served; every other process's writes are refused while a live claim stands.
        self.owner_id: str | None = None
        self._unserved_until = 0.0

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, url: str, *, storage_options: dict | None = None, read_only: bool = False,
             create: bool = False, defaults: dict[str, str] | None = None,
             read_facts=None) -> "LogRoot":
        """read_facts (an object store's; logcore.storage.read_facts.ReadFacts): reads are
        answered and kept by it, as its policy says (a Spark source's planner records, its
        tasks replay); ignored on local disk."""
        storage = _remembering(open_storage(url, storage_options, read_only=read_only), read_facts)
        # (an object store lists a missing prefix as empty: no existence check first)
        names = storage.list_dir("") if not storage.is_local or storage.exists("") else []
        if TOPICS_FILE in names:
            return cls(storage, kafka_copy=False, defaults=defaults, url=url,
                       storage_options=storage_options)
        kafka_like = looks_like_kafka_log_dir(storage, names)
        if kafka_like and not create:
            if not read_only:
                logger.info("%s has no %s: opening it read-only as a copy of a Kafka log dir",
                            storage.url, TOPICS_FILE)
            ro = _remembering(open_storage(url, storage_options, read_only=True), read_facts)
            return cls(ro, kafka_copy=True, defaults=defaults, url=url, storage_options=storage_options)
        if not create:
            raise NotALogRootError(
                f"{storage.url} is not a log root: it has no {TOPICS_FILE} and no Kafka partition"
                " folders (create one with `seglog topics --create`, or LogRoot.open(..., create=True))")
        if read_only:
            raise ReadOnlyLogError(f"cannot create a log root at {storage.url} read-only")
        if names and not kafka_like and any(not n.startswith(".") for n in names):
            raise NotALogRootError(
                f"{storage.url} is not empty and is not a log root (found {', '.join(names[:5])});"
                " refusing to create a log root there")
        storage.makedirs("")
        # Credentials never go into the root (any reader of it could read them): they stay in
        # the creator's config, which passes them to every open as `defaults`.
        stored, _ = split_secrets(dict(defaults or {}))
        cluster_id = TopicsFile(storage, read_only=False).create(stored)
        if META_PROPERTIES not in names:       # (the listing just taken)
            storage.write_atomic(META_PROPERTIES, (
                f"# seglog log root\nversion=1\ncluster.id={cluster_id}\nnode.id=0\n").encode())
        return cls(storage, kafka_copy=False, defaults=defaults, url=url,
                   storage_options=storage_options)

    @property
    def url(self) -> str:
        return self.storage.url

    # ------------------------------------------------------------------ topic metadata
    def cluster_id(self) -> str | None:
        """The root's cluster id (written at creation, also in meta.properties), or None when it
        has none (a Kafka log dir copy). Raises NotALogRootError for an unreadable topics file."""
        cluster = self.topics_file.read()[0].get("cluster_id")
        return str(cluster) if cluster else None

    def _update_doc(self, change):
        """A change of the topics file (TopicsFile.update) on a writable root."""
        self._require_writable()
        return self.topics_file.update(change)

    def _require_writable(self) -> None:
        if self.read_only:
            what = "a copy of a Kafka log dir" if self.kafka_copy else "opened read-only"
            raise ReadOnlyLogError(f"{self.storage.url} is {what}: it is never written")

    def served_by(self):
        """The live claim of a process (a broker) that serves this root, or None
        (logcore.log.root_owner; a stale claim counts as none)."""
        if self.read_only:
            return None
        if not self.storage.is_local and time.monotonic() < self._unserved_until:
            return None        # an object store's answer (one GET) holds for a second
        from logcore.log.root_owner import live_owner
        owner = live_owner(self.storage)
        if owner is None or owner.owner_id == self.owner_id:
            self._unserved_until = time.monotonic() + 1.0
            return None
        return owner

    def check_not_served(self, what: str, hint: str | None = None) -> None:
        """Raise RootServedError (naming the broker and how to write through it) when another
        process serves this root: a root a broker serves is written only through that broker."""
        owner = self.served_by()
        if owner is not None:
            from logcore.log.root_owner import served_error
            raise served_error(self.storage.url, owner, what, hint)

    def _topics(self) -> dict[str, dict]:
        if self.kafka_copy:
            return kafka_topics(self.storage)
        return self.topics_file.read()[0]["topics"]

    def defaults(self) -> dict[str, str]:
        """The topic defaults in effect: the static ones, then the dynamic layer over them."""
        return {**self.static_defaults(), **self._dynamic_defaults}

    def static_defaults(self) -> dict[str, str]:
        """The root's stored defaults with the opener's (a broker's properties) over them."""
        return self._static_over({} if self.kafka_copy else self.topics_file.read()[0].get("defaults", {}))

    def _static_over(self, stored: dict) -> dict[str, str]:
        return {**stored, **self.topics_file.secrets, **self._defaults_override}

    def _topic_and_defaults(self, name: str) -> tuple[TopicInfo, dict[str, str]]:
        """The topic and the defaults in effect from one read of the topics file (a partition's
        open on an object store used to read it once for each)."""
        if self.kafka_copy:
            topics, stored = kafka_topics(self.storage), {}
        else:
            doc = self.topics_file.read()[0]
            topics, stored = doc["topics"], doc.get("defaults", {})
        if name not in topics:
            raise TopicNotFoundError(f"topic {name!r} does not exist in {self.storage.url}")
        return topic_info(name, topics[name]), {**self._static_over(stored), **self._dynamic_defaults}

    def set_dynamic_defaults(self, layer: dict[str, str]) -> None:
        """Defaults changed at runtime (a broker's dynamic configs, kept by the broker, not in
        the root's topics file), over the static ones from now on."""
        self._dynamic_defaults = dict(layer)

    def topic_infos(self) -> tuple[dict[str, TopicInfo], str | None]:
        """Every topic as one consistent snapshot, and the topics file's version (None for a
        Kafka copy or a root without the file): a caller that keeps the version re-reads only
        when another process changed the topics."""
        if self.kafka_copy:
            doc, version = {"topics": kafka_topics(self.storage)}, None
        else:
            doc, version = self.topics_file.read()
        return {n: topic_info(n, t) for n, t in doc["topics"].items()}, version

    def list_topics(self) -> list[str]:
        return sorted(self._topics())

    def describe_topic(self, name: str) -> TopicInfo:
        topics = self._topics()
        if name not in topics:
            raise TopicNotFoundError(f"topic {name!r} does not exist in {self.storage.url}")
        return topic_info(name, topics[name])

    def topic_config(self, name: str) -> LogConfig:
        return LogConfig.from_props(self.describe_topic(name).config, self.defaults())

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None, *,
                     topic_id: str | None = None, hosted=None) -> TopicInfo:
        """Create a topic; `topic_id` (Kafka's base64 form) keeps an id given elsewhere (a
        cluster member's replica of a topic the cluster created), else a new one is drawn.
        `hosted` (a cluster member's log dir): the partitions this root holds replicas of; only
        those get a folder, and readers of any other one get ReplicaNotAvailableError."""
        self._require_writable()
        validate_topic_name(name)
        if not isinstance(partitions, int) or partitions < 1:
            raise InvalidConfigError(f"partitions must be a positive integer, got {partitions!r}")
        overrides = {k: str(v) for k, v in (config or {}).items()}
        validate_topic_overrides(overrides)
        defaults = self.defaults()
        check_topic_against_root(name, LogConfig.from_props(overrides, defaults), defaults)
        topic_id = format_topic_id(parse_topic_id(topic_id) if topic_id else new_topic_id())

        held = None if hosted is None else sorted({int(p) for p in hosted if 0 <= int(p) < partitions})

        def add(doc):
            if name in doc["topics"]:
                raise TopicExistsError(f"topic {name!r} already exists in {self.storage.url}")
            entry = {"topic_id": topic_id, "partitions": partitions, "config": overrides}
            if held is not None:
                entry["hosted"] = held
            doc["topics"][name] = entry

        self._update_doc(add)
        self._init_partitions(name, range(partitions) if held is None else held, topic_id)
        return TopicInfo(name, topic_id, partitions, overrides, None if held is None else tuple(held))

    def _init_partitions(self, topic: str, partitions, topic_id: str) -> None:
        partitions = list(partitions)
        if self.storage.is_local or len(partitions) < 2:
            for p in partitions:
                self._init_partition(topic, p, topic_id)
            return
        # an object store: the partitions' metadata objects are PUT at the same time
        with ThreadPoolExecutor(min(len(partitions), 8), thread_name_prefix="topic-create") as pool:
            for future in [pool.submit(self._init_partition, topic, p, topic_id) for p in partitions]:
                future.result()

    def _init_partition(self, topic: str, partition: int, topic_id: str) -> None:
        d = partition_dir(topic, partition)
        self.storage.makedirs(d)
        PartitionMetadataFile(self.storage, self.storage.join(d, PARTITION_METADATA)).write(parse_topic_id(topic_id))

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        self._require_writable()

        def grow(doc):
            if name not in doc["topics"]:
                raise TopicNotFoundError(f"topic {name!r} does not exist in {self.storage.url}")
            t = doc["topics"][name]
            if not isinstance(total, int) or total <= t["partitions"]:
                raise InvalidConfigError(
                    f"topic {name!r} has {t['partitions']} partitions; the count can only grow"
                    f" (asked for {total})")
            old = t["partitions"]
            t["partitions"] = total
            return old, t["topic_id"], t.get("hosted")

        old, topic_id, hosted = self._update_doc(grow)
        for p in range(old, total):
            if hosted is None:          # a cluster member's new replicas come with set_hosted
                self._init_partition(name, p, topic_id)
        return self.describe_topic(name)

    def set_hosted(self, name: str, add=(), remove=()) -> tuple[int, ...]:
        """A cluster member's log dir: record that it now holds replicas of the partitions `add`
        of topic `name` (their folders are made first) and no longer of `remove` (their files
        stay until deleted). One conditional replace of the topics file; returns the new set."""
        self._require_writable()
        add = {int(p) for p in add}
        remove = {int(p) for p in remove} - add
        info = self.describe_topic(name)
        current = set(range(info.partitions) if info.hosted is None else info.hosted)
        for p in sorted(add - current):
            if not 0 <= p < info.partitions:
                raise TopicNotFoundError(f"topic {name!r} has partitions 0..{info.partitions - 1};"
                                         f" there is no partition {p}")
            if not self.storage.exists(self.storage.join(partition_dir(name, p), PARTITION_METADATA)):
                self._init_partition(name, p, info.topic_id)

        def change(doc):
            t = doc["topics"].get(name)
            if t is None or t.get("topic_id") != info.topic_id:
                raise TopicNotFoundError(f"topic {name!r} does not exist in {self.storage.url}")
            held = set(t["hosted"]) if "hosted" in t else set(range(int(t["partitions"])))
            t["hosted"] = sorted((held | add) - remove)
            return tuple(t["hosted"])

        if add <= current and not (remove & current) and info.hosted is not None:
            return info.hosted
        return self._update_doc(change)

    def broker_record(self) -> dict | None:
        """The cluster member whose log dir this root is, as it recorded itself at its start
        ({"node_id", "host", "port"}: its advertised listener), or None."""
        if self.kafka_copy:
            return None
        record = self.topics_file.read()[0].get("broker")
        return dict(record) if isinstance(record, dict) else None

    def record_broker(self, node_id: int, host: str, port: int) -> None:
        """A cluster member's log dir says whose it is and on which host (kept when the broker
        stops): readers name it in errors, and the Spark source prefers replicas on its host."""
        record = {"node_id": int(node_id), "host": str(host), "port": int(port)}
        if self.broker_record() == record:
            return

        def change(doc):
            doc["broker"] = record
        self._update_doc(change)

    def not_hosted(self, info: TopicInfo, partition: int, url: str | None = None) -> ReplicaNotAvailableError:
        """The error for reading a partition this root holds no replica of."""
        record = self.broker_record() or {}
        whose = (f"broker {record['node_id']}'s" if "node_id" in record else "a cluster member's")
        held = ", ".join(str(p) for p in info.hosted) if info.hosted else "none"
        return ReplicaNotAvailableError(
            f"{info.name}-{partition} has no replica in {url or self.storage.url}: that log dir is"
            f" {whose}, which holds replicas of partitions [{held}] of {info.name} ({TOPICS_FILE});"
            f" read it from the log.dirs of a broker that holds it")

    def alter_topic_config(self, name: str, config: dict[str, str]) -> TopicInfo:
        overrides = {k: str(v) for k, v in config.items()}
        validate_topic_overrides(overrides)

        def alter(doc):
            if name not in doc["topics"]:
                raise TopicNotFoundError(f"topic {name!r} does not exist in {self.storage.url}")
            merged = dict(doc["topics"][name].get("config", {}))
            merged.update(overrides)
            defaults = self._static_over(doc.get("defaults", {}))
            check_topic_against_root(name, LogConfig.from_props(merged, defaults), defaults)
            doc["topics"][name]["config"] = merged

        self._update_doc(alter)
        return self.describe_topic(name)

    def set_topic_config(self, name: str, config: dict[str, str]) -> TopicInfo:
        """Replace the topic's overrides with `config` (validated against the defaults in
        effect); an override left out goes back to its default."""
        overrides = validate_topic_overrides({k: str(v) for k, v in config.items()}, self.defaults())

        def replace(doc):
            if name not in doc["topics"]:
                raise TopicNotFoundError(f"topic {name!r} does not exist in {self.storage.url}")
            defaults = {**self._static_over(doc.get("defaults", {})), **self._dynamic_defaults}
            check_topic_against_root(name, LogConfig.from_props(overrides, defaults), defaults)
            doc["topics"][name]["config"] = overrides

        self._update_doc(replace)
        return self.describe_topic(name)

    def delete_topic(self, name: str, remote_partitions: Iterable[int] | None = None) -> None:
        """remote_partitions: the partitions whose remote data this deletion deletes (default:
        every partition hosted here). A cluster broker names those it led, as Kafka has only
        the leader at deletion time delete a partition's remote data."""
        self._require_writable()
        owner = self.served_by()
        if owner is not None:
            from logcore.log.root_owner import served_error
            raise served_error(self.storage.url, owner, f"cannot delete topic {name!r}",
                               f"delete it through the broker's DeleteTopics (kafka-topics.sh"
                               f" --bootstrap-server {owner.bootstrap} --delete --topic {name})")

        def remove(doc):
            if name not in doc["topics"]:
                raise TopicNotFoundError(f"topic {name!r} does not exist in {self.storage.url}")
            return doc["topics"].pop(name)["partitions"]

        info = self.describe_topic(name)
        count = self._update_doc(remove)
        self._delete_remote_data(info, remote_partitions)
        for p in range(count):
            d = partition_dir(name, p)
            if self.storage.is_local:
                LocalPartitionState(self.storage, name, p).forget()
            self.storage.delete_dir(d)

    def _delete_remote_data(self, info: TopicInfo, partitions: Iterable[int] | None) -> None:
        """A deleted topic's remote segments go after it, in the background (the remote tier
        records the deletion; closing the root waits for it)."""
        config = LogConfig.from_props(info.config, self.defaults())
        tier = self.remote_tier()
        if tier is None or not (config.remote_storage_enable or config.remote_log_delete_on_disable):
            return
        if partitions is None:
            partitions = range(info.partitions) if info.hosted is None else info.hosted
        for p in sorted(partitions):
            tier.delete_partition(info.name, info.topic_id, p)

    def resume_remote_deletions(self, broker_id: int) -> int:
        """At a broker's start: the remote tier records `broker_id` in what it writes, and the
        remote deletions of deleted topics that a killed broker left unfinished are submitted
        again (in the background); how many."""
        tier = self.remote_tier()
        if tier is None:
            return 0
        tier.attach_broker(broker_id)
        live = set()
        for name in self.list_topics():
            topic_id = self.describe_topic(name).topic_id
            if topic_id:
                live.add(parse_topic_id(topic_id))
        return tier.resume_deletions(live)

    def partition_holds_data(self, name: str, partition: int) -> bool:
        """Whether the partition's folder has anything besides partition.metadata."""
        d = partition_dir(name, partition)
        if not self.storage.exists(d):
            return False
        return any(entry != PARTITION_METADATA for entry in self.storage.list_dir(d))

    def reset_partition(self, name: str, partition: int) -> None:
        """Delete one partition's data and local state (a cluster member's replica reassigned
        away); its folder is left with only partition.metadata, like a partition never written."""
        self._require_writable()
        info = self.describe_topic(name)
        if not 0 <= partition < info.partitions:
            raise TopicNotFoundError(f"topic {name!r} has no partition {partition} in {self.storage.url}")
        d = partition_dir(name, partition)
        if self.storage.is_local:
            LocalPartitionState(self.storage, name, partition).forget()
        self.storage.delete_dir(d)
        self._init_partition(name, partition, info.topic_id)

    # ------------------------------------------------------------------ partitions
    def log(self, topic: str, partition: int, *, writer: bool = False,
            truncate_uncommitted: bool = True, only_if_free: bool = False,
            resume: tuple[int, str] | None = None, repair: bool = False,
            replica: bool = False, read_range: tuple[int | None, int | None] | None = None) -> Log:
        """The partition's log; writer=True takes the partition (fencing any earlier writer),
        or with only_if_free=True raises PartitionInUseError when another writer holds it.

        resume=(epoch, writer id) of this caller's last hold (`log.leader_epoch`,
        `log.fence.writer_id`): keep that epoch if nobody took the partition since
        (`WriterFence.acquire`), else take it as usual.

        repair=True (with writer=True; `seglog repair`): recovery checks every segment and cuts
        the log at the first damaged batch even below the committed HW; `log.recovery` says
        what went.

        replica=True (with writer=True, local disk; a cluster broker's log): the leader epoch
        is given from outside and opening never truncates (logcore.log.replication).

        read_range=(start, end) (readers only): open just what reading offsets [start, end)
        needs (range_open.py); start None means the HW, end None the log's end. Reads outside
        the range still work, with the checks done on use."""
        if read_range is not None and writer:
            raise ValueError("LogRoot.log: read_range= is for readers (writer=False)")
        if resume is not None and not writer:
            raise ValueError("LogRoot.log: resume= is for writers (writer=True)")
        info, defaults = self._topic_and_defaults(topic)
        if not 0 <= partition < info.partitions:
            raise TopicNotFoundError(
                f"topic {topic!r} has partitions 0..{info.partitions - 1}; there is no partition {partition}")
        if info.hosted is not None and partition not in info.hosted:
            raise self.not_hosted(info, partition)
        if writer:
            self._require_writable()
            self.check_not_served(f"cannot write {topic}-{partition}")
        d = partition_dir(topic, partition)
        config = LogConfig.from_props(info.config, defaults)
        # A reader gets a read-only view of the storage: it can never change what it reads.
        storage = self.storage if writer else self._read_only_storage()
        # The storage kind is asked here once: the log gets the stores that match it.
        if storage.is_local:
            state, segment_store = LocalPartitionState(storage, topic, partition), LocalSegmentStore
        else:
            state, segment_store = ObjectPartitionState(storage, d), ObjectSegmentStore
        if replica and not (writer and storage.is_local):
            raise SegLogError(f"{d}: a replica log is a writer on local disk")
        if writer and replica:
            if repair:
                raise ValueError("LogRoot.log: repair= is for a path writer, not a replica")
            mode: OpenMode = ReplicaWriter(resume=resume)
        elif writer:
            mode = (RepairWriter if repair else PathWriter)(resume=resume,
                                                           truncate_uncommitted=truncate_uncommitted)
        elif self.kafka_copy:
            mode = KafkaCopyReader(clean=storage.exists(KAFKA_CLEAN_SHUTDOWN), read_range=read_range)
        elif read_range is not None:
            mode = RangeReader(*read_range)
        else:
            mode = PlainReader()
        fence = WriterFence(storage, d, only_if_free=only_if_free) if writer else None
        remote = self._remote_view(topic, info.topic_id, partition, config, defaults)
        log = Log(LogBackend(storage, state, segment_store, fence, remote), d, topic, partition, config, mode)
        self._open_logs.append(log)
        return log

    def _remote_view(self, topic: str, topic_id, partition: int, config: LogConfig,
                     defaults: dict[str, str] | None = None):
        """The partition's remote tier view when `config` tiers it, else None. Remote storage
        turned off with remote.log.delete.on.disable keeps the view until the remote log manager
        has deleted the remote segments (then it is empty). defaults: those in effect, when the
        caller just read them."""
        if not (config.remote_storage_enable or config.remote_log_delete_on_disable):
            return None
        defaults = self.defaults() if defaults is None else defaults
        tier = self._remote_tier_for(defaults)
        if tier is None:
            if not config.remote_storage_enable:
                return None
            check_topic_against_root(topic, config, defaults)
        return tier.view(topic, topic_id, partition)

    def reconfigure_log(self, log: Log, config: LogConfig, topic_id) -> None:
        """An open log of this root takes a changed topic config at once. Tiering turned on
        (remote.storage.enable set by AlterConfigs) gives it its remote view first, so the
        remote log manager copies it and local retention applies without a reopen."""
        if log.remote is None:
            view = self._remote_view(log.topic, topic_id, log.partition, config)
            if view is not None:
                log.attach_remote(view)
        log.reconfigure(config)

    def remote_tier(self) -> RemoteTier | None:
        """The root's tiered storage (the registered `RemoteTier`) when its settings
        enable it (remote.log.storage.system.enable, rsm.config.*), else None. One per root:
        its remote storage manager and caches are shared by the root's partition logs."""
        return self._remote_tier_for(self.defaults())

    def _remote_tier_for(self, defaults: dict[str, str]) -> RemoteTier | None:
        if not root_tiering_enabled(defaults):
            return None
        with self._remote_tier_lock:
            if self._remote_tier is None:
                # The tier sits above the log layer and registered itself (see remote_view.py).
                self._remote_tier = load_remote_tier()(defaults)
            return self._remote_tier

    def release_log(self, log: Log) -> None:
        """Close a log opened through this root now rather than at the root's close."""
        log.close()
        if log in self._open_logs:
            self._open_logs.remove(log)

    def _read_only_storage(self):
        if self._reader_storage is None:
            if self._url is None:
                return self.storage
            self._reader_storage = open_storage(self._url, self._storage_options, read_only=True)
        return self._reader_storage

    def close(self) -> None:
        for log in self._open_logs:
            log.close()
        self._open_logs.clear()
        if self._remote_tier is not None:
            self._remote_tier.close()
            self._remote_tier = None

    def __enter__(self) -> "LogRoot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogRoot({self.storage.url}{', kafka copy' if self.kafka_copy else ''})"


def _remembering(storage, read_facts):
    if read_facts is not None and not storage.is_local:
        storage.remember_reads(read_facts)
    return storage
