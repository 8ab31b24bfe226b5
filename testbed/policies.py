"""Pure policy decisions: saturation, headroom, victim choice, replica choice."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rushhour.testbed.job import Job


def endpoint_saturation(waiting: int, kv_usage: float, queue_depth: float, kv_threshold: float) -> float:
    """llm-d utilization-detector score of one endpoint: max(waiting/depth, kv/threshold)."""
    return max(waiting / queue_depth, kv_usage / kv_threshold)


def pool_saturation(scores: Sequence[float]) -> float:
    """Pool saturation = mean of endpoint scores; an empty pool is fully saturated."""
    if not scores:
        return 1.0
    return sum(scores) / len(scores)


def headroom(capacity: float, h_max: float, lam: float, tier: int) -> float:
    """KV headroom reserved by tier p: H_p = M * h_max * e^(-lambda * p)."""
    return capacity * h_max * math.exp(-lam * tier)


def freeness(capacity: float, used: float, tiers_present: set[int], batch: int,
             h_max: float, lam: float) -> float:
    """F_full = (M - sum V(r) - sum over tiers present of H_p) / B, with B >= 1."""
    reserved = sum(headroom(capacity, h_max, lam, p) for p in tiers_present)
    return (capacity - used - reserved) / max(1, batch)


def pick_victim(running: Sequence[Job]) -> Job:
    """vLLM preemption victim: max by (priority rank, arrival) = least urgent, latest arrival."""
    return max(running, key=lambda j: (j.rank, j.arrival_ns, j.seq))


@dataclass(frozen=True)
class ReplicaView:
    """What routing needs to know about one replica."""

    index: int
    load: float  # (waiting + running) / max_num_seqs
    prefix_hit: float  # fraction of the prompt already cached there
    freeness: float = 0.0


def pick_replica(views: Sequence[ReplicaView], prefix_aware: bool, use_freeness: bool) -> int | None:
    """Choose a replica: most free (headroom), or least loaded with a prefix-cache bonus."""
    if not views:
        return None
    if use_freeness:
        return max(views, key=lambda v: (v.freeness, -v.index)).index
    if prefix_aware:
        # llm-d's default scorers weigh prefix-cache affinity against queue/KV load
        return max(views, key=lambda v: (2.0 * v.prefix_hit - v.load, -v.index)).index
    return min(views, key=lambda v: (v.load, v.index)).index
