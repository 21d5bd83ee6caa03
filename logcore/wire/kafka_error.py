"""The errors of the Kafka protocol client, and the names it gives APIs and error codes in its
messages. Every failure of a client request is a KafkaError (a SegLogError) naming the broker and
the API; KafkaConnectionError is the retriable kind (connect again).
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from logcore.errors import SegLogError
from logcore.wire.error_codes import UNSUPPORTED_VERSION


class KafkaError(SegLogError):
    """A broker answered with an error, refused an API or version, or sent what cannot be read.
    `code` is the Kafka error code (-1: none applies)."""

    def __init__(self, message: str, code: int = -1):
        super().__init__(message)
        self.code = int(code)


class KafkaConnectionError(KafkaError):
    """The broker could not be reached, the connection broke, or a request timed out (retriable)."""


class UnsupportedApiError(KafkaError):
    """The broker does not serve the API, or no version of it that this client can send."""

    def __init__(self, message: str):
        super().__init__(message, UNSUPPORTED_VERSION)


def api_name(api_key: int) -> str:
    """Kafka's name of an API key (`ElectLeaders`), or `api key N` when kio does not know it."""
    name = api_key_map.get(api_key)
    return "".join(part.capitalize() for part in name.split("_")) if name else f"api key {api_key}"


def error_name(code: int) -> str:
    """Kafka's name of an error code (`ELECTION_NOT_NEEDED`), or `error N`."""
    try:
        return ErrorCode(int(code)).name.upper()
    except ValueError:
        return f"error {code}"
