"""Each persona kind's flow, by its ``kind`` (a new kind: its flow module here and one line in ``FLOWS``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rushhour.loadgen.flow import agent_trace, agents, chat, replay
from rushhour.loadgen.flow.protocol import Flow
from rushhour.scenarios.kinds import every_kind

# (host, persona) → the persona's driver loop as a flow; the simulator drives these in virtual time
FLOWS: Mapping[str, Callable[[Any, Any], Flow]] = every_kind(
    {"chat": chat.run_chat, "agent_swarm": agents.run_swarm, "trace_replay": replay.run_replay,
     "agent_trace": agent_trace.run_agent_trace}, __name__)
