"""llm-d / GAIE EPP flow control: priority bands, per-tenant flows, capacity, TTL, gated dispatch."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rushhour.testbed.config import FlowControlConfig
from rushhour.testbed.job import DONE, NO_ENDPOINTS, QUEUE_FULL, QUEUED, TTL_EXPIRED, Job

# llm_d_epp_flow_control_requests_total outcome label values
DISPATCHED = "Dispatched"
REJECTED_CAPACITY = "RejectedCapacity"
REJECTED_NO_ENDPOINTS = "RejectedNoEndpoints"
EVICTED_TTL = "EvictedTTL"
EVICTED_NO_ENDPOINTS = "EvictedNoEndpoints"
EVICTED_CANCELLED = "EvictedContextCancelled"
EVICTED_OTHER = "EvictedOther"

# the fairness_id label past llm-d's cap (llm-d-router docs/metrics.md): every later tenant's series
FAIRNESS_OTHER = "other"

# llm_d_epp_flow_control_revocations_total outcome label values (llm-d PR #2249)
REVOKE_CONFIRMED = "confirmed"
REVOKE_TIMED_OUT = "timed_out"
# llm_d_epp_flow_control_revocation_confirmation_seconds buckets (seconds of the testbed's clock; assumed)
CONFIRMATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Band:
    """One priority band: a FIFO queue per fairness ID (tenant)."""

    priority: int
    max_requests: int
    max_bytes: int
    flows: dict[str, deque[Job]] = field(default_factory=dict)
    count: int = 0
    bytes: int = 0
    rr_order: list[str] = field(default_factory=list)  # round-robin cycle over tenants
    rr_next: int = 0

    def push(self, job: Job) -> None:
        """Append to the job's flow."""
        q = self.flows.get(job.tenant)
        if q is None:
            q = self.flows[job.tenant] = deque()
            self.rr_order.append(job.tenant)
        q.append(job)
        self.count += 1
        self.bytes += job.body_bytes

    def discard(self, job: Job) -> bool:
        """Remove a job from its flow; False if absent."""
        q = self.flows.get(job.tenant)
        if not q:
            return False
        try:
            q.remove(job)  # one scan (a hard stop cancels a full band's thousands one by one)
        except ValueError:
            return False
        self.count -= 1
        self.bytes -= job.body_bytes
        return True

    def pop(self, fairness: str) -> Job:
        """Take the next job by the band's fairness policy (the band must not be empty)."""
        if fairness == "round-robin":
            n = len(self.rr_order)
            for k in range(n):
                tenant = self.rr_order[(self.rr_next + k) % n]
                if self.flows[tenant]:
                    self.rr_next = (self.rr_next + k + 1) % n
                    job = self.flows[tenant].popleft()
                    break
            else:  # pragma: no cover - guarded by count
                raise IndexError("empty band")
        else:
            # global-strict: FCFS across every flow of the band
            tenant = min((t for t, q in self.flows.items() if q), key=lambda t: self.flows[t][0].enqueue_ns)
            job = self.flows[tenant].popleft()
        self.count -= 1
        self.bytes -= job.body_bytes
        return job


class FlowController:
    """Bands keyed by priority; enqueue checks capacity, sweep expires, dispatch is strict priority."""

    def __init__(self, cfg: FlowControlConfig, ttl_s: float | None) -> None:
        self.cfg = cfg
        self.ttl_ns = int(ttl_s * 1e9) if ttl_s else 0  # 0 = no TTL
        no_ep = cfg.no_endpoint_ttl_s
        self.no_endpoint_ttl_ns = int(no_ep * 1e9) if no_ep else self.ttl_ns
        self.bands: dict[int, Band] = {}
        self._band_cfg = {b.priority: b for b in cfg.bands}
        self.count = 0
        self.bytes = 0
        self.outcomes: Counter[tuple[int, str]] = Counter()  # (priority, outcome) -> requests
        # the queue-duration histogram's count and sum per (fairness_id label, priority, outcome); the label
        # set stops at cfg.fairness_id_cap tenants, the rest share FAIRNESS_OTHER, as llm-d's metrics do
        self.left_count: Counter[tuple[str, int, str]] = Counter()
        self.left_wait_ns: Counter[tuple[str, int, str]] = Counter()
        self.fairness_labels: dict[str, str] = {}

    def fairness_label(self, tenant: str) -> str:
        """The fairness_id label this tenant's series carry: its own while the cap allows, else "other"."""
        label = self.fairness_labels.get(tenant)
        if label is not None:
            return label
        if len(self.fairness_labels) >= self.cfg.fairness_id_cap:
            return FAIRNESS_OTHER  # not remembered: a client sending endless fairness ids grows nothing here
        self.fairness_labels[tenant] = tenant
        return tenant

    def left(self, priority: int, outcome: str, tenant: str, waited_ns: int) -> None:
        """A request left flow control with ``outcome`` after ``waited_ns`` in its band (0: turned away)."""
        self.outcomes[priority, outcome] += 1
        key = (self.fairness_label(tenant), priority, outcome)
        self.left_count[key] += 1
        self.left_wait_ns[key] += max(0, waited_ns)

    def band(self, priority: int) -> Band:
        """The band for a priority, provisioned on first use from the defaults."""
        b = self.bands.get(priority)
        if b is None:
            bc = self._band_cfg.get(priority)
            # a value of 0 means "use the default", not zero capacity (as in the EPP config)
            mr = (bc.max_requests if bc else 0) or self.cfg.band_max_requests
            mb = (bc.max_bytes if bc else 0) or self.cfg.band_max_bytes
            b = self.bands[priority] = Band(priority, mr, mb)
        return b

    def blocked(self) -> int:
        """Requests of priority >= 0 queued in a band (the demand that may revoke sheddable work)."""
        return sum(b.count for p, b in self.bands.items() if p >= 0)

    def queue_sizes(self) -> dict[int, int]:
        """Queued requests per priority."""
        return {p: b.count for p, b in self.bands.items()}

    def full(self, priority: int, size: int) -> bool:
        """True if a request of this priority and body size would be turned away (pool or band capacity)."""
        b = self.band(priority)
        cfg = self.cfg
        return bool(
            (cfg.max_requests and self.count + 1 > cfg.max_requests)
            or (cfg.max_bytes and self.bytes + size > cfg.max_bytes)
            or b.count + 1 > b.max_requests
            or b.bytes + size > b.max_bytes
        )

    def enqueue(self, job: Job, now: int, endpoints: int) -> str | None:
        """Admit a job into its band, or return a drop kind (the arrival is rejected, never a queued one)."""
        b = self.band(job.priority)
        size = job.body_bytes
        if self.full(job.priority, size):
            kind = NO_ENDPOINTS if endpoints == 0 else QUEUE_FULL
            self.left(job.priority, REJECTED_NO_ENDPOINTS if endpoints == 0 else REJECTED_CAPACITY, job.tenant, 0)
            return kind
        job.state = QUEUED
        job.enqueue_ns = now
        b.push(job)
        self.count += 1
        self.bytes += size
        return None

    def cancel(self, job: Job, now: int) -> bool:
        """Remove a queued job whose client went away."""
        if job.state != QUEUED:  # only a queued job is in a band (its state changes as it leaves one)
            return False
        b = self.bands.get(job.priority)
        if b is None or not b.discard(job):
            return False
        self.count -= 1
        self.bytes -= job.body_bytes
        job.state = DONE
        self.left(job.priority, EVICTED_CANCELLED, job.tenant, now - job.enqueue_ns)
        return True

    def expire(self, now: int, endpoints: int) -> list[tuple[Job, str]]:
        """Sweep: remove jobs whose queue wait reached the TTL (the no-endpoint TTL when the pool is empty)."""
        ttl = self.ttl_ns if endpoints > 0 else self.no_endpoint_ttl_ns
        if ttl <= 0:
            return []
        kind = TTL_EXPIRED if endpoints > 0 else NO_ENDPOINTS
        label = EVICTED_TTL if endpoints > 0 else EVICTED_NO_ENDPOINTS
        out: list[tuple[Job, str]] = []
        for b in self.bands.values():
            for q in b.flows.values():
                while q and now - q[0].enqueue_ns >= ttl:
                    job = q.popleft()
                    b.count -= 1
                    b.bytes -= job.body_bytes
                    self.count -= 1
                    self.bytes -= job.body_bytes
                    job.state = DONE
                    self.left(job.priority, label, job.tenant, now - job.enqueue_ns)
                    out.append((job, kind))
        return out

    def dispatch_cycle(self, saturated: Callable[[float], bool], endpoints: int,
                       dispatch: Callable[[Job], None], now: int) -> int:
        """Dispatch highest band first while saturation < ceiling (``saturated(ceiling)`` is False); the first gated
        band stops the cycle."""
        n = 0
        if endpoints == 0:
            return 0
        for prio in sorted(self.bands, reverse=True):
            b = self.bands[prio]
            while b.count:
                if saturated(self.cfg.saturation_ceiling):
                    return n  # lower bands must not jump ahead of a gated higher band
                job = b.pop(self.cfg.fairness)
                self.count -= 1
                self.bytes -= job.body_bytes
                self.left(prio, DISPATCHED, job.tenant, now - job.enqueue_ns)
                dispatch(job)
                n += 1
        return n


@dataclass
class PendingRevocation:
    """A revocation issued and not yet confirmed: its victim's replica has not stepped since."""

    job: Job
    issued_ns: int
    replica: int
    step: int  # the replica's steps_total when the revocation was issued


class Revocations:
    """llm-d's demand-driven revocation bookkeeping: what was issued (per victim priority), what its replica
    confirmed or let time out, the reclaim target (blocked demand) and the pending reclaim."""

    def __init__(self, timeout_ns: int) -> None:
        self.timeout_ns = timeout_ns
        self.issued: Counter[int] = Counter()  # victim priority -> revocations issued
        self.outcomes: Counter[str] = Counter({REVOKE_CONFIRMED: 0, REVOKE_TIMED_OUT: 0})
        self.reclaim_target = 0  # requests of priority >= 0 blocked by a saturated pool, at the last cycle
        self.pending: list[PendingRevocation] = []
        self.buckets = [0] * len(CONFIRMATION_BUCKETS)  # per bucket (not cumulative)
        self.confirm_sum_s = 0.0
        self.confirm_count = 0

    def demand(self, blocked: int) -> int:
        """Set the reclaim target; how many new revocations it asks for (pending ones already count)."""
        self.reclaim_target = blocked
        return max(0, blocked - len(self.pending))

    def issue(self, job: Job, now: int, replica: int, step: int) -> None:
        """Count one revocation of a running ``job``."""
        self.issued[job.priority] += 1
        self.pending.append(PendingRevocation(job, now, replica, step))

    def settle(self, now: int, steps: Callable[[int], int | None]) -> None:
        """Confirm the revocations whose replica stepped since (``steps(i)``: its steps_total, None when down);
        time out those older than the timeout."""
        keep: list[PendingRevocation] = []
        for p in self.pending:
            s = steps(p.replica)
            if s is not None and s > p.step:
                self.outcomes[REVOKE_CONFIRMED] += 1
                self.observe((now - p.issued_ns) / 1e9)
            elif now - p.issued_ns >= self.timeout_ns:
                self.outcomes[REVOKE_TIMED_OUT] += 1
            else:
                keep.append(p)
        self.pending = keep

    def observe(self, seconds: float) -> None:
        """One confirmation time into the histogram."""
        self.confirm_sum_s += seconds
        self.confirm_count += 1
        for i, le in enumerate(CONFIRMATION_BUCKETS):
            if seconds <= le:
                self.buckets[i] += 1
                break
