"""`seglog broker`: serve a log root over the Kafka protocol (kafka-server-start)."""
from __future__ import annotations

from logcore.tools.arguments import _configs, _properties_file


def cmd_broker(args) -> int:
    from logcore.broker.server import run_from_properties
    overrides = _configs(args.override, "--override")
    return run_from_properties(_properties_file(args.config, "--config"), overrides)
