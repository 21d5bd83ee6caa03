"""How long a SASL session lasts before it must re-authenticate (KIP-368) on one listener:
`connections.max.reauth.ms`, overridden for the listener (`listener.name.<l>.connections.max.reauth.ms`)
and for one mechanism on it (`listener.name.<l>.<mechanism>.connections.max.reauth.ms`), as
Kafka's SaslChannelBuilder reads them: the most precise one given wins. 0: never."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SessionLifetimes:
    listener_ms: int = 0                                         # the listener's (or the broker's) value
    by_mechanism: dict[str, int] = field(default_factory=dict)   # mechanism (upper case) -> its override

    def ms(self, mechanism: str | None) -> int:
        """The lifetime of a session authenticated with `mechanism`, in ms (0: no limit)."""
        return self.by_mechanism.get(mechanism, self.listener_ms) if mechanism else self.listener_ms

