"""A saturating rushhour run against a real vLLM (each release in engines/releases.toml): the audit's
classes equal vLLM's own counters.

vLLM labels no tier (no priority label on its counters), so the comparison is in total; per tier the
test checks that every tier was turned away and that no rejection is failed, transport or unclassified.
A release without ``vllm:admission_rejections_total`` (0.31: its ``lacks`` in engines/releases.toml) has its
served answers compared with the counter and its rejections checked by class only.
"""

from __future__ import annotations

import json

from .conftest import pinned_release
from .helpers import NEVER_FOR_A_REJECTION, SCENARIOS, attempts, counted_run, tiers, total

SUCCESS = "vllm:request_success_total"
REJECTIONS = "vllm:admission_rejections_total"
SERVED_REASONS = ("stop", "length", "repetition")  # FinishReason: abort and error are not served
TIERS = ("interactive", "batch")


def test_saturated_vllm_counts_equal_the_audit(vllm_release, request, tmp_path) -> None:  # type: ignore[no-untyped-def]
    vllm_server = vllm_release  # every release in engines/releases.toml: pinned and extra
    if pinned_release(request.node.callspec.params["vllm_release"]):
        # the pinned release's run is the session's, shared with test_br02_real (see saturated_vllm_run)
        before, summary, after = request.getfixturevalue("saturated_vllm_run")
    else:
        before, summary, after = counted_run(vllm_server, SCENARIOS / "vllm-saturate.yaml", tmp_path / "runs")

    def delta(name: str, **labels: str | tuple[str, ...]) -> int:
        return round(total(after, name, **labels) - total(before, name, **labels))

    server = {
        "served": delta(SUCCESS, finished_reason=SERVED_REASONS),
        "aborted": delta(SUCCESS, finished_reason="abort"),
        "rejected": delta(REJECTIONS),
        "rejected_max_num_queued_reqs": delta(REJECTIONS, reason="max_num_queued_reqs"),
        "rejected_max_num_queued_tokens": delta(REJECTIONS, reason="max_num_queued_tokens"),
    }
    per_tier = {t: {k: v for k, v in tiers(summary)[t]["attempts_by_class"].items() if v}  # type: ignore[union-attr]
                for t in TIERS}
    status = {t: tiers(summary)[t]["status_by_class"] for t in TIERS}
    print(json.dumps({"vllm_counters": server, "audit": per_tier, "status_by_class": status}, indent=1))

    assert sum(attempts(summary, t, "served") for t in TIERS) == server["served"], (server, per_tier)
    checks = summary["crosscheck"]
    if REJECTIONS in vllm_server.info["lacks"]:
        # a release without the counter (vLLM 0.31; engines/releases.toml says so): its rejections are checked by
        # class only, and neither this test nor rushhour's cross-check may claim a match with a counter it lacks
        assert not any(name == REJECTIONS for name, _, _ in after), f"{vllm_server.version} has {REJECTIONS}"
        assert not any(str(c["metric"]).startswith(REJECTIONS) for c in checks), checks  # type: ignore[union-attr]
        # and the audit says that the client's rejections were not cross-checked, rather than staying silent
        unmeasured = [f for f in summary["findings"] if f["kind"] == "crosscheck_unmeasured"]  # type: ignore[union-attr]
        assert any(REJECTIONS in str(f["data"]["metric"]) and f["data"]["client_count"] == "queue_full"
                   for f in unmeasured), summary["findings"]
    else:
        assert sum(attempts(summary, t, "queue_full") for t in TIERS) == server["rejected"], (server, per_tier)
        assert server["rejected"] > 0, "the run did not saturate vLLM's admission limits"
    for tier in TIERS:
        assert attempts(summary, tier, "queue_full") > 0, f"{tier}: never turned away ({per_tier[tier]})"
        for cls in (*NEVER_FOR_A_REJECTION, "timeout", "not_sent"):
            assert attempts(summary, tier, cls) == 0, f"{tier}: {cls} in {per_tier[tier]}"
    # rushhour's own cross-check (its scraper, the vLLM profile's counter checks) agrees too.
    assert checks and all(c["matches"] for c in checks), checks  # type: ignore[union-attr]
