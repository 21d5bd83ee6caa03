"""The Produce request decoder and response encoder (producewire.c) and the Fetch request
decoder and response encoder (fetchwire.c) in C, compiled into the _fastcodec module this package owns, for
logcore.wire.produce_codec, logcore.wire.fetch_request and logcore.broker.fetch_response,
which document them."""
from __future__ import annotations

from logcore.records import _fastcodec

decode_produce_request = _fastcodec.decode_produce_request
encode_produce_results = _fastcodec.encode_produce_results
decode_fetch_request = _fastcodec.decode_fetch_request
encode_fetch_response = _fastcodec.encode_fetch_response
new_instance = _fastcodec.new_instance
