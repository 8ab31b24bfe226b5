"""LiteLLM custom-auth hook: a key ``sk-tier-<tier>-<anything>`` gets that tier's limits; no database.

The tiers and their limits come from the environment (``RUSHHOUR_LITELLM_TIERS``, JSON, set by
engines/serve.py) so a test can choose them. The key alias (the tier's name) labels LiteLLM's
Prometheus series per key (``api_key_alias``), which is how the tests compare per tier.
"""

from __future__ import annotations

import json
import os
import re

from fastapi import HTTPException, Request
from litellm.proxy._types import UserAPIKeyAuth

_KEY = re.compile(r"sk-tier-([a-z0-9_]+)-[A-Za-z0-9_.-]+")


def _tiers() -> dict[str, dict[str, int | None]]:
    return dict(json.loads(os.environ.get("RUSHHOUR_LITELLM_TIERS", "{}")))


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    """Map the bearer key to its tier's limits; anything else is refused (LiteLLM answers 401)."""
    key = api_key.removeprefix("Bearer ").strip() if api_key else ""
    match = _KEY.fullmatch(key)
    tiers = _tiers()
    if not match or match.group(1) not in tiers:
        # An HTTPException, not a bare Exception: LiteLLM's handler for the latter imports prisma (not installed).
        raise HTTPException(status_code=401, detail="Invalid API key: not a rushhour tier key (sk-tier-<tier>-...)")
    tier = match.group(1)
    limits = tiers[tier]
    return UserAPIKeyAuth(api_key=key, key_alias=tier, team_id=tier, team_alias=tier,
                          max_parallel_requests=limits.get("max_parallel_requests"),
                          rpm_limit=limits.get("rpm_limit"), tpm_limit=limits.get("tpm_limit"),
                          metadata={"tier": tier})
