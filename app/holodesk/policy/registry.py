"""The action protocols by name: ``holo-v1`` (:class:`holodesk.policy.protocol.HoloV1Protocol`) and
``agent-loop-v1``, H Company's published agent contract (:mod:`holodesk.policy.contract`)."""

from __future__ import annotations

from typing import Final

from holodesk.errors import SettingsError
from holodesk.policy.base import ActionProtocol
from holodesk.policy.contract import PROTOCOL as AGENT_LOOP_V1
from holodesk.policy.protocol import PROTOCOL_NAMES, HoloV1Protocol

_PROTOCOLS: Final[dict[str, ActionProtocol]] = {"holo-v1": HoloV1Protocol(), AGENT_LOOP_V1.name: AGENT_LOOP_V1}


def get_protocol(name: str = "holo-v1") -> ActionProtocol:
    """The action protocol called ``name`` (one of :data:`holodesk.policy.protocol.PROTOCOL_NAMES`).

    Raises:
        SettingsError: for an unknown name; the message lists the known ones.
    """
    protocol = _PROTOCOLS.get(name) if isinstance(name, str) else None
    if protocol is None:
        raise SettingsError(f"unknown action protocol {name!r}",
                            hint="Known protocols: " + ", ".join(PROTOCOL_NAMES) + ".")
    return protocol
