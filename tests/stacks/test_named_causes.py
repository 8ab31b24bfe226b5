"""Rules that name a cause (``Rule.finding``): vLLM refusing tools is failed, named once per tier in the audit."""

from __future__ import annotations

from typing import ClassVar

import pandas as pd

from rushhour.audit.build import _named_findings
from rushhour.audit.classify import classify_one, named_cause
from rushhour.stacks.vllm import TOOLS_REFUSED

TOOLS_400 = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
REQUIRED_400 = "tool_choice=\"required\" requires --tool-call-parser to be set"


def test_vllm_tools_refusal_is_failed_and_named_on_vllm_and_behind_litellm() -> None:
    for profile in ("vllm", "litellm"):
        for text in (TOOLS_400, REQUIRED_400, f"litellm.BadRequestError: OpenAIException - {TOOLS_400}"):
            assert classify_one(profile, status=400, error=text) == "failed"
            assert named_cause(profile, status=400, error=text) == TOOLS_REFUSED
    # another 400 stays an anonymous failed; a served answer has no cause
    assert named_cause("vllm", status=400, error="maximum context length is 2048 tokens") is None
    assert named_cause("vllm", status=200, error=TOOLS_400) is None


class _Scenario:
    profile = "vllm"
    route_profiles: ClassVar[dict[str, str]] = {}


def test_named_findings_count_per_tier_and_cause() -> None:
    rows = pd.DataFrame({
        "tier": ["agents", "agents", "agents", "chat"],
        "cls": ["failed", "failed", "failed", "served"],
        "status": [400, 400, 400, 200],
        "reason": [None, None, None, None],
        "error": [TOOLS_400, TOOLS_400, "maximum context length", None],
        "in_band_error": [None, None, None, None],
        "route": ["primary"] * 4,
    })
    found = _named_findings(rows, _Scenario())  # type: ignore[arg-type]
    assert [(f.tier, f.data["count"], f.data["status"], f.data["cause"]) for f in found] == [
        ("agents", 2, 400, TOOLS_REFUSED)]
    assert found[0].severity == "error" and TOOLS_REFUSED in found[0].message
