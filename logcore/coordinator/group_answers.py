"""The classic protocol's answers as the coordinator hands them out: JoinGroup's and SyncGroup's,
granted or refused. The broker answers the refusals too (a request it turns away before the
coordinator), and so does the consumer-group coordinator for a classic member of its groups.
"""
from __future__ import annotations

from logcore.coordinator.group import Group, Member
from logcore.wire import error_codes as E


def join_answer(group: Group, member: Member) -> dict:
    """JoinGroup's answer to `member` for the group's current generation; the leader gets every
    member's metadata for the chosen protocol, so that it can compute the assignment."""
    members = []
    if member.member_id == group.leader:
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata_for(group.protocol)} for m in group.members.values()]
    return {"throttle_time": 0, "error_code": E.NONE, "generation_id": group.generation,
            "protocol_type": group.protocol_type, "protocol_name": group.protocol,
            "leader": group.leader or "", "member_id": member.member_id, "members": members,
            "skip_assignment": False}


def sync_answer(group: Group, member: Member) -> dict:
    """SyncGroup's answer handing `member` its share of the group's assignment."""
    return {"throttle_time": 0, "error_code": E.NONE, "assignment": member.assignment,
            "protocol_type": group.protocol_type, "protocol_name": group.protocol}


def join_error(code: int, member_id: str) -> dict:
    """JoinGroup's answer refusing `member_id` with `code`."""
    return {"throttle_time": 0, "error_code": code, "generation_id": -1, "protocol_type": None,
            "protocol_name": "", "leader": "", "member_id": member_id, "members": [],
            "skip_assignment": False}


def sync_error(code: int) -> dict:
    """SyncGroup's answer refusing with `code`."""
    return {"throttle_time": 0, "error_code": code, "assignment": b"", "protocol_type": None,
            "protocol_name": None}
