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
    from logcore.log.config import load_properties

    if not overrides:
        return
    props = load_properties(path)
    try:
        BrokerConfig.from_props({**props, **overrides}, source=path)
        return
    except InvalidConfigError:
        pass
    try:
        BrokerConfig.from_props(props, source=path)
    except InvalidConfigError:
        return              # the file is refused on its own: the broker names the file
    applied = dict(props)
    for name, value in overrides.items():
        applied[name] = value
        try:
            BrokerConfig.from_props(applied, source=f"--override {name}={value}")
        except InvalidConfigError as exc:
            raise InvalidConfigError(str(exc)) from None
