"""The rules between topic settings, one function each over a resolved config's values (by
Kafka name); each error names both settings (the compaction one starts with Kafka's exact words). `LogConfig.from_props` checks them all."""
from __future__ import annotations

from typing import Any, Callable

from logcore.errors import InvalidConfigError


def check_compaction_lags(values: dict[str, Any]) -> None:
    lo, hi = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if lo > hi:
        raise InvalidConfigError(
            f"min.compaction.lag.ms ({lo}) must not be greater than max.compaction.lag.ms ({hi})")


def check_remote_storage_not_compacted(values: dict[str, Any]) -> None:
    if values["remote.storage.enable"] and "compact" in values["cleanup.policy"]:
        # Kafka's own words (LogConfig) first, so clients and scripts see the same refusal; then
        # the two settings, as every refusal here names them
        policy = _listed(values["cleanup.policy"])
        raise InvalidConfigError("Remote log storage only supports topics with cleanup.policy=delete"
                                 f" (remote.storage.enable=true, cleanup.policy={policy})")


def _listed(value) -> str:
    return value if isinstance(value, str) else ",".join(value)


def check_local_retention_ms(values: dict[str, Any]) -> None:
    """Kafka checks this only for remote-storage topics: local limits mean nothing otherwise."""
    if not values["remote.storage.enable"]:
        return
    local, total = values["local.retention.ms"], values["retention.ms"]
    if local == -2 or total == -1:
        return
    if local == -1:
        raise InvalidConfigError(
            f"local.retention.ms=-1 (forever) is not allowed when retention.ms={total} is finite")
    if local > total:
        raise InvalidConfigError(
            f"local.retention.ms ({local}) must not be greater than retention.ms ({total})")


def check_local_retention_bytes(values: dict[str, Any]) -> None:
    if not values["remote.storage.enable"]:
        return
    local, total = values["local.retention.bytes"], values["retention.bytes"]
    if local == -2 or total == -1:
        return
    if local == -1:
        raise InvalidConfigError(
            f"local.retention.bytes=-1 (unlimited) is not allowed when retention.bytes={total} is finite")
    if local > total:
        raise InvalidConfigError(
            f"local.retention.bytes ({local}) must not be greater than retention.bytes ({total})")


def check_retention_when_copy_disabled(values: dict[str, Any]) -> None:
    """With copying to remote storage disabled, local and total retention must agree (Kafka rule)."""
    if not (values["remote.storage.enable"] and values["remote.log.copy.disable"]):
        return
    for local_name, total_name in (("local.retention.ms", "retention.ms"),
                                   ("local.retention.bytes", "retention.bytes")):
        local, total = values[local_name], values[total_name]
        if local != -2 and local != total:
            raise InvalidConfigError(
                f"{local_name} ({local}) must equal {total_name} ({total}) when "
                "remote.log.copy.disable=true")


TURN_OFF_REMOTE_STORAGE_MESSAGE = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep"
    " the remote data and turn to read only, please set"
    " `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable remote"
    " storage and delete all remote data, please set"
    " `remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def check_turning_off_remote_storage(old: dict[str, Any], new: dict[str, Any]) -> None:
    """A change of a topic's settings (not a rule within one config): remote storage goes from
    on to off only with remote.log.delete.on.disable=true, as in Kafka (KIP-950): the remote
    data is then deleted, so it must be asked for."""
    if (old["remote.storage.enable"] and not new["remote.storage.enable"]
            and not new["remote.log.delete.on.disable"]):
        raise InvalidConfigError(TURN_OFF_REMOTE_STORAGE_MESSAGE)


CROSS_FIELD_RULES: tuple[Callable[[dict[str, Any]], None], ...] = (
    check_compaction_lags,
    check_remote_storage_not_compacted,
    check_local_retention_ms,
    check_local_retention_bytes,
    check_retention_when_copy_disabled,
)


def check_cross_field_rules(values: dict[str, Any]) -> None:
    for rule in CROSS_FIELD_RULES:
        rule(values)
