"""The list of stack profiles and look-ups by scenario name (adding a stack = one module + one line here)."""

from __future__ import annotations

from collections.abc import Mapping

from rushhour.stacks import anthropic, gaie_v1, litellm, llmd, openai, sglang, smg, vllm
from rushhour.stacks.profile import StackProfile

# Order matters only for reading reason headers when the profile is not known (the wire client).
STACKS: tuple[StackProfile, ...] = (
    llmd.PROFILE,
    gaie_v1.PROFILE,
    vllm.PROFILE,
    sglang.PROFILE,
    openai.PROFILE,
    anthropic.PROFILE,
    smg.PROFILE,
    litellm.PROFILE,
)
DEFAULT = "llm-d"

_BY_NAME: dict[str, StackProfile] = {p.name: p for p in STACKS}
_ALIASES: dict[str, str] = {alias: p.name for p in STACKS for alias, _ in p.aliases}
_TESTBED: dict[str, str] = {p.name: p.testbed for p in STACKS}
_TESTBED.update({alias: testbed for p in STACKS for alias, testbed in p.aliases})
if len(_BY_NAME) != len(STACKS) or set(_ALIASES) & set(_BY_NAME):
    raise RuntimeError("stack profile names and aliases must be unique")

# Every name a scenario may give as ``target.profile`` (stacks first, then aliases).
NAMES: tuple[str, ...] = (*_BY_NAME, *_ALIASES)


class UnknownProfile(KeyError):
    """A profile name no stack module defines."""

    def __str__(self) -> str:
        return f"unknown stack profile {self.args[0]!r} (known: {', '.join(NAMES)})"


def canonical(name: str | None) -> str:
    """The stack a scenario name means (``testbed``, ``fifo`` and ``headroom`` speak llm-d); KeyError if none."""
    key = (name or DEFAULT).lower()
    key = _ALIASES.get(key, key)
    if key not in _BY_NAME:
        raise UnknownProfile(name)
    return key


def get(name: str | None) -> StackProfile:
    """The profile of a scenario name or alias; ``UnknownProfile`` (a KeyError) if there is none."""
    return _BY_NAME[canonical(name)]


def testbed_profile(name: str) -> str:
    """The testbed profile that imitates this scenario profile."""
    if name not in _TESTBED:
        raise UnknownProfile(name)
    return _TESTBED[name]


def header_reason(headers: Mapping[str, str], status: int, profile: str | None = None) -> str | None:
    """The drop reason in response headers: the given profile's, else the first any stack recognises."""
    if profile is not None:
        return get(profile).header_reason(headers, status)
    for stack in STACKS:
        reason = stack.header_reason(headers, status)
        if reason:
            return reason
    return None
