"""A group member's client host as Kafka names it in DescribeGroups and ConsumerGroupDescribe:
the connection's address after a slash ("/127.0.0.1"), or "" when unknown."""
from __future__ import annotations


def member_host(request) -> str:
    host = getattr(request, "client_host", "")
    return f"/{host}" if host else ""
