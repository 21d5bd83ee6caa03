"""`seglog broker`: serve a log root over the Kafka protocol (kafka-server-start)."""
from __future__ import annotations

from logcore.errors import InvalidConfigError
from logcore.tools.arguments import _configs, _properties_file


def cmd_broker(args) -> int:
    from logcore.broker.server import run_from_properties
    overrides = _configs(args.override, "--override")
    path = _properties_file(args.config, "--config")
    _check_overrides(path, overrides)
    return run_from_properties(path, overrides)


def _check_overrides(path: str, overrides: dict[str, str]) -> None:
    """A configuration refused because of an --override names that --override, not the file
    (the broker's own check names its properties file: right for the file's lines only)."""
    from logcore.broker.config import BrokerConfig
    from logcore.log.properties_file import load_properties

    if not overrides:
        return
    props = load_properties(path)
    try:
        BrokerConfig.from_props({**props, **overrides}, source=path)
        return
    except InvalidConfigError as exc:
        combined = str(exc)
    for name, value in overrides.items():          # refused on its own: a bad value, an unknown name
        try:
            BrokerConfig.from_props({name: value}, source=f"--override {name}={value}")
        except InvalidConfigError as exc:
            raise InvalidConfigError(str(exc)) from None
    for name, value in overrides.items():          # refused with the file's other settings
        without = {**props, **{k: v for k, v in overrides.items() if k != name}}
        try:
            BrokerConfig.from_props(without, source=path)
        except InvalidConfigError:
            continue
        raise InvalidConfigError(f"--override {name}={value}: " + combined.removeprefix(f"{path}: "))
