"""The Produce request decoder and response encoder in C (producewire.c, compiled into the
_fastcodec module this package owns), for logcore.wire.produce_codec, which documents them."""
from __future__ import annotations

from logcore.records import _fastcodec

decode_produce_request = _fastcodec.decode_produce_request
encode_produce_results = _fastcodec.encode_produce_results
