"""Validity judged by harm, not symptom: loop lag that moved no recorded time warns; a moved time voids.

The pure pieces (audit.harm: each first token's possible error; audit.remedy: who lagged and what to change)
and check_validity on frames shaped as the audit gives them; the records' end-to-end path is in
tests/e2e/test_validity_harm_e2e.py, the rule against the testbed's ledger in benchmarks/validity.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from helpers import MS, RunBuilder, S

from rushhour.audit import harm, remedy, run_audit
from rushhour.audit.validity import check_validity, with_shortfall

NAN = float("nan")


def _errors(clock: list[str | None], batch: list[float], tokens: list[float], first: list[float],
            last: list[float], lag: list[float]) -> np.ndarray:
    """As the writer records them: the stream's mean gap over its tokens (a batch's tokens share one time)."""
    tok = np.array(tokens, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        itl = np.where(tok > 1, (np.array(last) - np.array(first)) / (tok - 1), np.nan)
    return harm.first_token_error_ns(np.array(clock, dtype=object), np.array(batch, dtype=np.float64), tok, itl,
                                     np.array(first), np.array(lag))


def test_a_kernel_stamp_read_alone_is_exact_whatever_the_loop_did() -> None:
    err = _errors(["kernel"], [1], [30], [1e9], [1.3e9], [400 * MS])
    assert err[0] == 0.0


def test_a_kernel_stamp_of_a_read_holding_later_tokens_is_late_by_their_span() -> None:
    # 4 tokens in the first read, then 10 more 10 ms apart: the stamp is the 4th token's, 3 gaps late
    err = _errors(["kernel"], [4], [14], [1e9], [1e9 + 100 * MS], [400 * MS])
    assert err[0] == 30 * MS
    # the whole answer in that one read: no gap seen after it, the loop lag in effect bounds it
    err = _errors(["kernel"], [5], [5], [1e9], [1e9], [70 * MS])
    assert err[0] == 70 * MS


def test_a_user_space_stamp_carries_the_loop_lag_in_effect() -> None:
    err = _errors(["recv", None], [1, 1], [5, 5], [1e9, 1e9], [1.1e9, 1.1e9], [80 * MS, NAN])
    assert err[0] == 80 * MS and err[1] == 0.0  # no health sample near it: nothing known against it
    assert np.isnan(_errors(["kernel"], [NAN], [0], [NAN], [NAN], [5 * MS])[0])  # no first token: not judged


def test_loop_lag_in_effect_is_the_worst_sample_just_after() -> None:
    ts = np.array([1.0, 2.0, 3.0, 4.0]) * S
    lag = np.array([2, 300, 4, 90]) * MS
    out = harm.loop_lag_at(np.array([0.5 * S, 1.2 * S, 2.6 * S, 9 * S, NAN]), ts, lag.astype(np.float64))
    assert out[0] == 300 * MS  # samples at 1 s and 2 s are within 1.5 s after 0.5 s
    assert out[1] == 300 * MS and out[2] == 90 * MS
    assert np.isnan(out[3]) and np.isnan(out[4])


def test_too_many_moved_needs_a_share_and_a_count() -> None:
    assert harm.moved_first_tokens(np.array([11 * MS] * 2 + [0.0] * 98)) == (False, 2, 100)
    assert harm.moved_first_tokens(np.array([11 * MS] * 3 + [0.0] * 97)) == (True, 3, 100)
    assert harm.moved_first_tokens(np.array([11 * MS] * 3 + [0.0] * 497))[0] is False  # 0.6 %
    assert harm.moved_first_tokens(np.array([9 * MS] * 50))[0] is False  # within the tolerance


# --------------------------------------------------------------------------- check_validity


def _health(lags_ms: list[float], *, cpu: float = 20.0, load: float = 5.5, pid: int = 4242, workers: int = 1,
            index: int = 0, cpus: int = 2) -> pd.DataFrame:
    n = len(lags_ms)
    return pd.DataFrame({
        "ts_ns": [int((0.7 + i) * S) for i in range(n)], "loop_lag_ns": [int(v * MS) for v in lags_ms],
        "cpu_percent": [cpu] * n, "in_flight": [2] * n, "not_sent_total": [0] * n, "pid": [pid] * n,
        "worker_index": [index] * n, "workers": [workers] * n, "load1": [load] * n, "cpus": [cpus] * n,
    })


def _attempts(n: int, *, clock: str | None = "kernel", batch: int = 1, late_ms: float = 0.5) -> pd.DataFrame:
    first = np.array([i * S + 500 * MS for i in range(n)], dtype=np.float64)
    frame = pd.DataFrame({
        "not_sent": np.zeros(n, bool), "reason": [None] * n, "status": [200] * n, "attempt": [1] * n,
        "sent_ns": [i * S for i in range(n)], "schedule_lag_ns": [late_ms * MS] * n,
        "first_token_ns": first, "first_token_read_ns": first + 300 * MS, "first_token_batch": [batch] * n,
        "tokens": [20] * n, "itl_mean_ns": [20 * MS * (20 - batch) / 19] * n,
    })
    if clock is not None:
        frame["first_token_clock"] = [clock] * n
    return frame


LAGGING = [1.0] * 4 + [300.0] * 8 + [1.0] * 8  # 8 s in a row over 50 ms, with requests in flight


def test_lag_that_moved_no_time_is_a_warning_with_its_cause() -> None:
    v = check_validity(_attempts(20), _health(LAGGING), skipped_lines=0, truncated_shards=0, duration_s=20)
    assert v.valid, v.reasons
    assert v.timing_judged_by == "harm" and v.first_tokens_moved == 0
    assert len(v.warnings) == 1 and v.warnings[0].startswith("generator loop lag > 50 ms in 8 of 20")
    assert "moved no send or first-token time" in v.warnings[0]
    assert v.cause is not None and "the Locust process (pid 4242) lagged most" in v.cause
    assert "load average up to 5.5 on 2 core(s)" in v.cause and "20 % of a core" in v.cause
    assert any("quieter host" in r for r in v.remedies)


def test_the_same_lag_on_records_without_timing_facts_still_voids() -> None:
    # an older writer's records: nothing says the stamps were the kernel's, so the symptom decides (fail closed)
    v = check_validity(_attempts(20, clock=None), _health(LAGGING), skipped_lines=0, truncated_shards=0,
                       duration_s=20)
    assert not v.valid and v.timing_judged_by == "symptom"
    assert v.reasons[0].startswith("generator loop lag") and "tail latency not trustworthy" in v.reasons[0]


def test_user_space_stamps_taken_in_the_lag_void_with_cause_and_remedy() -> None:
    v = check_validity(_attempts(20, clock="recv"), _health(LAGGING, cpu=95.0, workers=2, index=1, cpus=4),
                       skipped_lines=0, truncated_shards=0, duration_s=20, embedded_testbed=True)
    assert not v.valid
    assert any("first token(s) stamped more than 10 ms late" in r for r in v.reasons), v.reasons
    assert v.lagging_process == "worker 1 (pid 4242)"
    assert v.cause is not None and "embedded testbed runs on the same cores" in v.cause
    # the process was busy itself and there are cores to spare: more processes first; the testbed elsewhere
    assert v.remedies[0].startswith("fewer users per process: `--processes 3`"), v.remedies
    assert any("testbed on another host" in r for r in v.remedies)


def test_kernel_stamps_of_batched_reads_void() -> None:
    # the loop read each first token with 5 later tokens (20 ms apart): each stamp is 100 ms late
    v = check_validity(_attempts(20, batch=6), _health(LAGGING), skipped_lines=0, truncated_shards=0, duration_s=20)
    assert not v.valid and v.first_tokens_moved == 20


def test_late_sends_void_whatever_the_stamps() -> None:
    v = check_validity(_attempts(20, late_ms=250.0), _health(LAGGING), skipped_lines=0, truncated_shards=0,
                       duration_s=20)
    assert not v.valid
    assert any("after their intended time" in r for r in v.reasons)
    assert not any("moved no send" in w for w in v.warnings)  # the lag did move something: not called harmless
    assert v.cause is not None


def test_a_quiet_run_names_no_cause() -> None:
    v = check_validity(_attempts(20), _health([1.0] * 20), skipped_lines=0, truncated_shards=0, duration_s=20)
    assert v.valid and not v.warnings and v.cause is None and v.load_avg_max == 5.5


def test_a_shortfall_names_its_cause_too() -> None:
    v = check_validity(_attempts(20), _health([1.0] * 20), skipped_lines=0, truncated_shards=0, duration_s=20)
    assert v.valid and v.cause is None
    # the samples say the process was busy (its share of the run above 70 % of a core): more processes
    short = with_shortfall(v, [{"name": "shortfall", "ts_ns": 5 * S}], _health([1.0] * 20, cpu=80.0))
    assert not short.valid and short.cause is not None and "the Locust process (pid 4242)" in short.cause
    assert short.remedies[0].startswith("fewer users per process: `--processes 2`"), short.remedies


def test_remedies_follow_the_cause() -> None:
    crowded = remedy.Diagnosis(load_avg_max=6.0, cores=2, cpu_max_percent=20.0, processes=1)
    assert remedy._remedies(crowded) == ["a quieter host (load average 6.0 on 2 core(s)): other work held "
                                         "the generator's core"]
    busy = remedy.Diagnosis(load_avg_max=1.0, cores=2, cpu_max_percent=99.0, processes=2)
    assert busy.processes == 2 and remedy._remedies(busy)[0].startswith("more load processes than this host")


def test_the_audit_reads_the_facts_from_the_shards(tmp_path: Path) -> None:
    """Through the shards: kernel-stamped first tokens under sustained lag stay valid, named as a warning."""
    b = RunBuilder(tmp_path)
    for i in range(20):
        sent = i * S
        b.request(sent_ns=sent, intended_ns=sent, first_token_clock="kernel", first_token_batch=1,
                  first_token_read_ns=sent + 400 * MS)
    for i, lag in enumerate(LAGGING):
        b.health(int((0.7 + i) * S), int(lag * MS), 12.0, in_flight=2, pid=777, workers=1, load1=4.0, cpus=2)
    summary = run_audit(b.close(), write=False)
    v = summary.validity
    assert v.valid and v.warnings and v.lagging_process == "the Locust process (pid 777)", v
    assert any(f.kind == "generator_lag" and "pid 777" in f.message for f in summary.findings)
