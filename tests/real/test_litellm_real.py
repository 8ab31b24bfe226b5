"""A saturating rushhour run against a real LiteLLM proxy (each release in engines/releases.toml): per tier
(= key alias), the audit's classes equal LiteLLM's own Prometheus counters; capacity 429s and quota 429s land
in different classes."""

from __future__ import annotations

import json

from .helpers import NEVER_FOR_A_REJECTION, SCENARIOS, attempts, run_rushhour, scrape, settle, tiers, total

KEYS = {"RH_LITELLM_KEY_INTERACTIVE": "sk-tier-interactive-rushhour", "RH_LITELLM_KEY_BATCH": "sk-tier-batch-rushhour"}
TOTAL = "litellm_proxy_total_requests_metric_total"
FAILED = "litellm_proxy_failed_requests_metric_total"
ROUTE = "/v1/chat/completions"
TIERS = ("interactive", "batch")


def test_saturated_litellm_counts_equal_the_audit_per_tier(litellm_release, tmp_path) -> None:  # type: ignore[no-untyped-def]
    litellm_server = litellm_release  # every release in engines/releases.toml: pinned and extra
    url = litellm_server.url + "/metrics"
    auth = {"authorization": f"Bearer {KEYS['RH_LITELLM_KEY_INTERACTIVE']}"}

    def chat_samples() -> list[tuple[str, dict[str, str], float]]:
        # Only the chat route: the scrapes themselves are requests LiteLLM counts (route /metrics/).
        return [s for s in scrape(url, auth, server=litellm_server)
                if s[1].get("route") == ROUTE or s[0] == "litellm_in_flight_requests"]

    def idle(samples: list[tuple[str, dict[str, str], float]]) -> bool:
        return total(samples, "litellm_in_flight_requests") <= 1  # the scrape in flight

    before = settle(chat_samples, idle)
    summary = run_rushhour(SCENARIOS / "litellm-tiers.yaml", litellm_server.url, tmp_path / "runs", env=KEYS)
    after = settle(chat_samples, idle)

    def delta(name: str, **labels: str | tuple[str, ...]) -> int:
        return round(total(after, name, **labels) - total(before, name, **labels))

    figures = {}
    for tier in TIERS:
        server = {
            "200": delta(TOTAL, api_key_alias=tier, status_code="200"),
            "429": delta(TOTAL, api_key_alias=tier, status_code="429"),
            "429 RateLimitError (deployment slots)": delta(FAILED, api_key_alias=tier, exception_status="429",
                                                           exception_class="RateLimitError"),
            "429 HTTPException (key limits)": delta(FAILED, api_key_alias=tier, exception_status="429",
                                                   exception_class="HTTPException"),
            "other failures": delta(FAILED, api_key_alias=tier) - delta(FAILED, api_key_alias=tier,
                                                                        exception_status="429"),
        }
        audit = {k: v for k, v in tiers(summary)[tier]["attempts_by_class"].items() if v}  # type: ignore[union-attr]
        figures[tier] = {"litellm_counters": server, "audit": audit}
    print(json.dumps(figures, indent=1))

    for tier in TIERS:
        server, audit = figures[tier]["litellm_counters"], figures[tier]["audit"]
        assert attempts(summary, tier, "served") == server["200"], (tier, figures[tier])
        assert attempts(summary, tier, "queue_full") == server["429 RateLimitError (deployment slots)"], \
            (tier, figures[tier])
        assert attempts(summary, tier, "rate_limited") == server["429 HTTPException (key limits)"], \
            (tier, figures[tier])
        assert attempts(summary, tier, "queue_full") + attempts(summary, tier, "rate_limited") == server["429"]
        assert server["other failures"] == 0, (tier, figures[tier])
        for cls in (*NEVER_FOR_A_REJECTION, "timeout", "not_sent"):
            assert attempts(summary, tier, cls) == 0, f"{tier}: {cls} in {audit}"
    # Saturation reached both limits: the deployment's slots (both tiers) and batch's own key limits.
    assert attempts(summary, "interactive", "queue_full") > 0
    assert attempts(summary, "batch", "queue_full") > 0
    assert attempts(summary, "batch", "rate_limited") > 0
    assert attempts(summary, "interactive", "rate_limited") == 0  # interactive's key has room
    # rushhour's own cross-check (its scraper with the metrics credential, the litellm profile's checks) agrees.
    checks = summary["crosscheck"]
    assert checks and all(c["matches"] for c in checks), checks  # type: ignore[union-attr]
