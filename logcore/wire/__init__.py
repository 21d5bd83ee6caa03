"""The Kafka wire protocol, shared by the broker, the Spark connector and the tools.

- `protocol`: the request/response envelope over kio schemas (`parse_request`, `encode_response`,
  `build` a kio dataclass from a dict of Kafka field names).
- `produce_codec`: Produce v3..v10 decoded and encoded by hand, in C (records stay views of the frame).
- `primitives`: Kafka's primitive wire types for the hand-written codecs.
- `api_keys`, `error_codes`, `list_offsets`, `config_resources`: Kafka's API keys, error codes
  (and which seglog error answers as which), ListOffsets' special timestamps and DescribeConfigs'
  resource types and config sources, each defined here once.
- `client`: a Kafka protocol client (blocking `KafkaConnection`, asyncio `AsyncKafkaConnection`,
  `bootstrap`), with ApiVersions negotiation.

It depends only on `logcore.records` and `logcore.errors`: the broker and the tools sit above it.
"""
