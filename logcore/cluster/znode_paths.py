"""Where cluster metadata lives in ZooKeeper: Kafka's (2.x, ZooKeeper-mode) znode layout. What
each znode holds is in logcore.cluster.znode_json.

    /brokers/ids/<id>                          ephemeral: the broker's registration; its czxid is
                                               the broker epoch (KIP-380)
    /brokers/topics/<t>                        {"version":3,"topic_id":..,"partitions":{"0":[1,2]},
                                                "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<t>/partitions/<p>/state   {"version":1,"leader":1,"leader_epoch":0,
                                                "isr":[1,2],"controller_epoch":1}
    /controller                                ephemeral {"version":1,"brokerid":1,"timestamp":"ms"}
    /controller_epoch                          "1"
    /config/topics/<t>                         {"version":1,"config":{"k":"v"}}
    /config/changes/config_change_NNNNNNNNNN   {"version":2,"entity_path":"topics/<t>"}
    /admin/delete_topics/<t>                   a deletion request (the controller carries it out)
    /admin/preferred_replica_election          {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /admin/unclean_leader_election             seglog's own, the same JSON: an unclean election of
                                               these leaderless partitions (ElectLeaders UNCLEAN)
    /admin/reassign_partitions                 {"version":1,"partitions":[{"topic":..,"partition":..,
                                                "replicas":[..]}]}: reassignments for the controller
                                               (AlterPartitionReassignments; "replicas":null cancels)
    /admin/controlled_shutdown/<id>            seglog's own, ephemeral: broker <id> is shutting down
                                               (Kafka's ControlledShutdown request, as a znode)
    /isr_change_notification/isr_change_NNNNNNNNNN
                                               {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /cluster/id                                {"version":"1","id":"<22-char base64>"}
    /latest_producer_id_block                  {"version":1,"broker":1,"block_start":"0","block_end":"999"}
"""
from __future__ import annotations

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_ELECTION = "/admin/preferred_replica_election"
UNCLEAN_ELECTION = "/admin/unclean_leader_election"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGES = "/isr_change_notification"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
# Created at start when absent (the ones a watch or a sequential create needs to exist).
PERSISTENT_PATHS = (BROKER_IDS, BROKER_TOPICS, "/brokers/seqid", CONFIG_TOPICS, CONFIG_CHANGES,
                    "/config/brokers", DELETE_TOPICS, ISR_CHANGES, "/cluster", CONTROLLED_SHUTDOWN)
ISR_CHANGE_PREFIX = f"{ISR_CHANGES}/isr_change_"               # sequential: NNNNNNNNNN follows
CONFIG_CHANGE_NAME = "config_change_"                             # sequential, in CONFIG_CHANGES


def broker_path(broker_id) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def deletion_path(topic: str) -> str:
    """The request to delete `topic` (the controller carries it out)."""
    return f"{DELETE_TOPICS}/{topic}"


def controlled_shutdown_path(broker_id) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def isr_change_path(name: str) -> str:
    return f"{ISR_CHANGES}/{name}"
