"""The audit's fast paths give the plain ones' answers: sorted quantiles, tier-grouped rows, the table's row groups."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import MS, RunBuilder

from rushhour import audit
from rushhour.audit import load, stats, table
from rushhour.audit.build import audit_run, rows_of
from rushhour.audit.stats import longest_gap, sorted_quantiles
from rushhour.audit.validity import _answer_times, dark_spans

QS = [0.0, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0]


@pytest.mark.parametrize("seed", range(6))
def test_sorted_quantiles_are_numpys_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in (1, 2, 3, 7, 100, 1001, 65_537):
        for values in (rng.lognormal(5, 2, n), rng.integers(0, 4, n).astype(np.float64), rng.normal(0, 1e9, n)):
            values.sort()
            assert np.array_equal(sorted_quantiles(values, QS), np.quantile(values, QS))


def _sorted_percentiles(values: np.ndarray, scale: float, ci: bool) -> dict[str, Any]:
    """``percentiles`` as it was before selection: one full sort, every figure read off it."""
    arr = np.sort(values[np.isfinite(values)]) * scale
    fields = dict(zip(stats.QUANTILES, sorted_quantiles(arr, list(stats.QUANTILES.values())).tolist(), strict=True))
    ci_ = {name: stats.bootstrap_quantile_ci(arr, q) for name, q in stats.QUANTILES.items()} if ci else {}
    return {"n": len(arr), "max": float(arr[-1]), "ci": ci_, **fields, "mean": float(arr.mean())}


@pytest.mark.parametrize("seed", range(3))
def test_percentiles_by_selection_are_the_full_sort_s(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in (1, 5, stats.SELECT_MIN - 1, stats.SELECT_MIN, 20_011, 300_000):
        for values in (rng.lognormal(5, 1, n), rng.integers(0, 30, n).astype(np.float64)):
            values[rng.random(n) < 0.02] = np.nan
            if not np.isfinite(values).any():
                continue
            for ci in (True, False):
                want = _sorted_percentiles(values, 1e-6, ci)
                got = stats.percentiles(values, scale=1e-6, ci=ci).model_dump()
                assert got["mean"] == pytest.approx(want.pop("mean"), rel=1e-12)  # the sum's order differs
                assert {k: got[k] for k in want} == want  # every order statistic bit for bit


@pytest.mark.parametrize("groups", [1, 7, stats.FEW_GROUPS + 1])
def test_group_quantiles_are_pandas_groupby_quantiles(groups: int) -> None:
    rng = np.random.default_rng(groups)
    keys = rng.integers(0, groups, 50_000)
    values = rng.lognormal(0, 1, 50_000)
    values[rng.random(50_000) < 0.1] = np.nan
    got = stats.group_quantiles(keys, values, (0.5, 0.99), groups + 2)  # two empty groups at the end
    frame = pd.DataFrame({"k": keys, "v": values}).dropna()
    for row, q in enumerate((0.5, 0.99)):
        want = frame.groupby("k")["v"].quantile(q).reindex(range(groups + 2))
        assert np.allclose(got[row], want.to_numpy(), rtol=1e-15, equal_nan=True)


def test_tier_order_groups_each_tier_keeping_its_order() -> None:
    tiers = ["b", "a", "b", None, "a", "c", "b"]
    t = pa.table({"tier": tiers, "seq": list(range(len(tiers)))})
    order = load.tier_order(t)
    assert order is not None
    regrouped = t.take(pa.array(order))
    seen = regrouped.column("tier").to_pylist()
    assert seen == ["b", "b", "b", "a", "a", "c", None]  # each tier one run (first seen first), no tier last
    assert regrouped.column("seq").to_pylist() == [0, 2, 6, 1, 4, 5, 3]  # the rows' own order inside it
    assert load.tier_order(regrouped) is None  # grouped already: nothing to do
    assert load.tier_order(pa.table({"seq": [1, 2]})) is None


def test_rows_of_is_a_slice_when_contiguous_and_a_copy_otherwise() -> None:
    frame = pd.DataFrame({"x": np.arange(10, dtype=np.float64), "tier": list("aaabbbbccc")})
    inside = (frame["tier"] == "b").to_numpy()
    part = rows_of(frame, inside)
    assert part.equals(frame[inside])
    assert np.shares_memory(part["x"].to_numpy(), frame["x"].to_numpy())
    scattered = np.isin(frame["x"].to_numpy(), [1, 5, 8])
    assert rows_of(frame, scattered).equals(frame[scattered])
    assert len(rows_of(frame, np.zeros(10, dtype=bool))) == 0


def test_answer_times_are_every_answer_sorted() -> None:
    frame = pd.DataFrame({"headers_ns": [5.0, np.nan, 1.0, 9.0], "first_token_ns": [6.0, 2.0, np.nan, 10.0],
                          "done_ns": [7.0, 3.0, 4.0, np.nan]})
    answered = np.array([True, True, False, True])
    expected = np.sort(np.concatenate([frame[c].to_numpy()[answered] for c in frame.columns]))
    assert np.array_equal(_answer_times(frame, answered), expected[np.isfinite(expected)])


def test_dark_spans_take_unsorted_or_sorted_answers_alike() -> None:
    rng = np.random.default_rng(3)
    sent = np.sort(rng.uniform(0, 1e10, 400))
    end = sent + rng.uniform(0, 1e8, 400)
    dark = rng.random(400) < 0.6
    answers = rng.uniform(0, 1e10, 300)
    assert dark_spans(sent, end, dark, answers) == dark_spans(sent, end, dark, np.sort(answers))
    assert dark_spans(sent, end, dark, answers, min_ns=5e8) == dark_spans(sent, end, dark, np.sort(answers), min_ns=5e8)


def _mixed_run(root: Path, n: int) -> Path:
    b = RunBuilder(root, profile="vllm")
    for i in range(n):
        tier = ("interactive", "standard", "batch")[i % 3]  # interleaved, over two processes: the audit regroups
        process = ("p1", "p2")[i % 2]
        if i % 5 == 4:
            b.dropped(status=429, tier=tier, persona=f"chat-{tier}", sent_ns=i * MS, process=process)
        else:
            b.request(tier=tier, persona=f"chat-{tier}", sent_ns=i * MS, process=process)
    return b.close()


def test_regrouped_rows_give_the_figures_of_the_rows_as_written(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    run = _mixed_run(tmp_path, 60)
    grouped = audit_run(run)
    monkeypatch.setattr(load, "tier_order", lambda table: None)  # the rows as written: tiers interleaved
    written = audit_run(run)
    assert [t.model_dump() for t in grouped.tiers] == [t.model_dump() for t in written.tiers]
    assert grouped.validity == written.validity and grouped.timeline == written.timeline
    assert [t.requests for t in grouped.tiers] == [20, 20, 20]
    assert [t.unserved for t in grouped.tiers] == [4, 4, 4]


def test_the_table_in_row_groups_is_the_table_built_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _mixed_run(tmp_path, 50)
    monkeypatch.setattr(table, "ROW_GROUP", 7)  # 8 row groups, the last one short
    audit.run_audit(run)
    stored = pq.read_table(run / table.ATTEMPTS_FILE)
    assert pq.ParquetFile(run / table.ATTEMPTS_FILE).metadata.num_row_groups == 8
    whole = audit.audit(run, with_table=True).table  # the in-memory table, built in one piece
    assert whole is not None
    for name in table.COLUMNS:
        assert stored.column(name).to_pylist() == whole.column(name).to_pylist(), name
    # each tier's attempts are one run of rows, so the tiers' figures are computed on slices
    tiers = stored.column("tier").to_pylist()
    assert sum(1 for i in range(1, len(tiers)) if tiers[i] != tiers[i - 1]) == 2


def test_only_columns_of_few_values_get_a_parquet_dictionary(tmp_path: Path) -> None:
    run = _mixed_run(tmp_path, 12)
    audit.run_audit(run)
    meta = pq.ParquetFile(run / table.ATTEMPTS_FILE).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert any("DICTIONARY" in e or "RLE_DICTIONARY" in e for e in encodings["tier"])
    for unique in ("sent_ns", "seq", "request_id"):
        assert not any("DICTIONARY" in e for e in encodings[unique]), (unique, encodings[unique])


def _longest_gap_by_hand(starts: np.ndarray, ends: np.ndarray, served: np.ndarray) -> float | None:
    """Reference: merge the intervals one by one, then the longest piece between sorted boundaries and services."""
    spans: list[list[float]] = []
    for a, b in sorted(zip(starts.tolist(), np.maximum(ends, starts).tolist(), strict=True)):
        if spans and a <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    if not spans:
        return None
    finite = [x for x in served.tolist() if np.isfinite(x)]
    return max(float(np.diff(sorted([a, b, *(x for x in finite if a <= x <= b)])).max()) for a, b in spans)


@pytest.mark.parametrize("seed", range(4))
def test_longest_gap_is_the_longest_piece_by_hand(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n, m, grid = int(rng.integers(0, 30)), int(rng.integers(0, 30)), int(rng.integers(1, 6))
        starts = np.round(rng.uniform(0, 100, n) / grid) * grid  # on a grid: ties between everything
        ends = starts + np.round(rng.exponential(5, n) / grid) * grid * (rng.random(n) < 0.8)
        served = np.append(np.round(rng.uniform(-5, 110, m) / grid) * grid, [np.nan] * int(rng.integers(0, 2)))
        assert longest_gap(starts, ends, served) == _longest_gap_by_hand(starts, ends, served)


def _factorized(ids: list[str | None]) -> np.ndarray:
    codes, uniques = pd.factorize(pd.Series(ids, dtype=object))
    missing = codes < 0
    codes[missing] = len(uniques) + np.arange(int(missing.sum()))
    return codes.astype(np.int64)


def test_logical_codes_of_fixed_width_ids_are_the_string_factorize(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    pool = [f"{int(x):032x}" for x in rng.integers(0, 2**62, 300)]
    ids = [pool[int(i)] for i in rng.integers(0, 300, 2000)]
    column = pa.chunked_array([pa.array(ids[:700]), pa.array(ids[700:])])
    assert load._fixed_width_codes(column.combine_chunks()) is not None  # the fast path is taken
    assert np.array_equal(load._logical_codes(column), _factorized(ids))
    sliced = column.combine_chunks().slice(13, 500)  # an offset into the buffers
    assert np.array_equal(load._logical_codes(pa.chunked_array([sliced])), _factorized(ids[13:513]))
    # every id mixed to one value: the check finds rows that differ, and the strings are hashed instead
    monkeypatch.setattr(load, "_MIX", np.zeros(4, dtype=np.uint64))
    assert load._fixed_width_codes(column.combine_chunks()) is None
    assert np.array_equal(load._logical_codes(column), _factorized(ids))


def test_logical_codes_of_other_ids_take_the_string_path() -> None:
    for ids in (["a", "bb", "a", "ccc"], ["x" * 32, None, "x" * 32], ["abc", "abd", "abc"], []):
        column = pa.chunked_array([pa.array(ids, type=pa.string())])
        assert load._fixed_width_codes(column.combine_chunks()) is None
        assert np.array_equal(load._logical_codes(column), _factorized(ids))


def _plain_column(col: pa.ChunkedArray, name: str, dtype: pa.DataType, order: np.ndarray | None) -> pd.Series:
    """The conversion as first written: every column taken in arrow, then converted."""
    if order is not None:
        col = col.take(pa.array(order))
    if name in load.CATEGORICAL and pa.types.is_string(dtype):
        col = pa.compute.dictionary_encode(col)
    elif name in load._ARROW_TEXT and pa.types.is_string(dtype):
        return pd.Series(col, dtype=pd.ArrowDtype(pa.string()))
    elif pa.types.is_integer(dtype):
        col = pa.compute.cast(col, pa.float64())
    elif pa.types.is_boolean(dtype):
        col = pa.compute.fill_null(col, False)
    return col.to_pandas()


def _chunked_request_table() -> pa.Table:
    """Request columns of every kind the frame holds, over three chunks with different dictionaries and nulls."""
    chunks = []
    for k, tiers in enumerate((["b", "a", "b"], ["c", None, "a", "b"], ["a", "a"])):
        n = len(tiers)
        chunks.append(pa.table({
            "request_id": [f"{k}{i:031x}" for i in range(n)],
            "tier": pa.array(tiers).dictionary_encode(),
            "task_id": pa.array([f"t{k}-{i % 2}" if i else None for i in range(n)]).dictionary_encode(),
            "status": pa.array([200 if i % 2 else None for i in range(n)], type=pa.int64()),
            "seq": pa.array(list(range(n)), type=pa.int64()),  # no nulls: int64 from arrow, float64 in the frame
            # nulls in one chunk only: that chunk is copied as float64 + NaN, the others read in place
            "tokens": pa.array([None if k == 1 and i == 2 else 10**15 + 7 * i for i in range(n)], type=pa.int64()),
            "complete": pa.array([True if i % 3 else None for i in range(n)]),
            "retry_after_s": pa.array([1.5 if i == 1 else None for i in range(n)], type=pa.float64()),
            "reason": pa.array(["x" if i else None for i in range(n)]),  # plain text of few values: categorical
        }))
    return pa.concat_tables(chunks)


@pytest.mark.parametrize("regroup", [False, True])
def test_each_column_converts_as_the_plain_conversion_does(regroup: bool) -> None:
    t = _chunked_request_table()
    order = load.tier_order(t) if regroup else None
    assert (order is not None) == regroup
    for name, dtype in zip(t.column_names, t.schema.types, strict=True):
        fast = load._column(t.column(name), name, dtype, order)
        plain = _plain_column(t.column(name), name, dtype, order)
        assert fast.dtype == plain.dtype, name
        assert fast.reset_index(drop=True).equals(plain.reset_index(drop=True)), name
        if isinstance(plain.dtype, pd.CategoricalDtype):
            assert list(fast.cat.categories) == list(plain.cat.categories), name  # first-seen order kept


def test_columns_converted_beside_give_the_frame_converted_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    t = _chunked_request_table()
    order = load.tier_order(t)
    alone = load._to_frame([t], order)
    where: dict[str, str] = {}
    convert = load._column

    def noting(col: pa.ChunkedArray, name: str, *args: Any) -> Any:
        where[name] = threading.current_thread().name
        return convert(col, name, *args)

    monkeypatch.setattr(load, "_column", noting)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="beside") as pool:
        pool.submit(time.sleep, 0.3)  # the other thread still busy (hashing the ids): this one converts all
        stolen = load._to_frame([t], order, pool)
        assert where["request_id"] == where["seq"] == threading.current_thread().name
        where.clear()
        pool.submit(time.sleep, 0).result()
        beside = load._to_frame([t], order, pool)
    assert list(beside.columns) == list(alone.columns) == t.column_names  # the columns' order kept
    assert beside.equals(alone) and stolen.equals(alone)
    assert set(where) == set(t.column_names)


def test_sidecar_batches_split_in_groups_as_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rushhour.records import columns, record

    writer_init, sidecar_init = record.ShardWriter.__init__, columns.SidecarWriter.__init__

    def few_lines(self: record.ShardWriter, *args: Any, **kwargs: Any) -> None:
        writer_init(self, *args, **{**kwargs, "flush_lines": 3})

    def four_rows(self: columns.SidecarWriter, shard: Path, *, batch_rows: int = 4) -> None:
        sidecar_init(self, shard, batch_rows=4)

    # many small sidecar batches: a flush every 3 lines, a batch every 4 rows
    monkeypatch.setattr(record.ShardWriter, "__init__", few_lines)
    monkeypatch.setattr(columns.SidecarWriter, "__init__", four_rows)
    run = _mixed_run(tmp_path, 90)
    grouped = audit_run(run)
    shards = sorted((run / "records").glob("*.jsonl"))
    assert all(columns.sidecar_path(p).exists() for p in shards)
    parts = load.read_shard(shards[0])
    assert parts.columnar_bytes == parts.body_bytes  # read from the sidecar, not parsed
    assert len(parts.per_kind["request"]) == 1  # 16 batches a group: one piece (the sidecar holds ~8 batches)
    monkeypatch.setattr(load, "SIDECAR_GROUP", 1)
    one_by_one = audit_run(run)
    assert [t.model_dump() for t in grouped.tiers] == [t.model_dump() for t in one_by_one.tiers]
    assert grouped.validity == one_by_one.validity and grouped.timeline == one_by_one.timeline
    alone = load.read_shard(shards[0])
    assert len(alone.per_kind["request"]) > 5  # a piece per sidecar batch
    for kind, pieces in parts.per_kind.items():  # each kind's rows, as read a batch at a time
        assert sum(map(len, pieces)) == sum(map(len, alone.per_kind[kind])), kind
        if pieces:
            assert pa.concat_tables(pieces).to_pylist() == pa.concat_tables(alone.per_kind[kind]).to_pylist(), kind


@pytest.mark.parametrize("seed", range(4))
def test_idle_ttft_by_lookup_is_the_nearest_bin_rule_per_attempt(seed: int) -> None:
    from rushhour.audit.calibration import Baseline, _bin

    rng = np.random.default_rng(seed)
    for _ in range(50):
        bins = np.unique(rng.integers(-5, 40, rng.integers(1, 8)))
        base = Baseline(bins, rng.uniform(1, 100, len(bins)), "calibration")
        size = np.concatenate([rng.lognormal(5, 4, 500), [0, -1, np.nan, np.inf, 5e-324, 1.7e308, 0.5, 1, 2, 3]])
        assert np.array_equal(base.idle_for(size), base._nearest_idle(_bin(size)), equal_nan=True)


@pytest.mark.parametrize("n", [0, 1, 7, 64, 1000, 5000])
def test_first_seen_codes_in_parts_are_pandas_factorize(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "PART_ROWS", 16)  # many parts of a few keys each: the part path, not the small one
    rng = np.random.default_rng(n)
    keys = rng.integers(0, 2**63, size=n, dtype=np.int64).astype(np.uint64) << np.uint64(1)
    if n > 1:
        again = rng.random(n) < 0.4
        keys[again] = keys[rng.integers(0, n, size=n)][again]  # repeats, some before their first sighting's row
    codes, first = load.first_seen_codes(keys)
    expected, uniques = pd.factorize(keys)
    assert np.array_equal(codes, expected)
    assert len(first) == len(uniques)
    assert all(int(np.flatnonzero(expected == k)[0]) == first[k] for k in range(len(uniques)))


def test_first_seen_codes_of_keys_in_one_part_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "PART_ROWS", 4)
    keys = np.array([5, 3, 5, 9, 3, 1, 1, 9, 2], dtype=np.uint64)  # top bits all zero: every key in part 0
    assert np.array_equal(load.first_seen_codes(keys)[0], pd.factorize(keys)[0])


def test_a_dictionary_column_converts_as_arrow_unifies_it() -> None:
    # three encode calls (each shares its growing dictionary over its chunks), nulls, an all-null chunk
    encoded = [pa.compute.dictionary_encode(pa.chunked_array([pa.array(a, type=pa.string()) for a in group]))
               for group in ([["t1", None, "t2"], ["t3", "t1"]], [["t9", "t2", None]], [[None, None]],
                             [["", "t4"], ["t9", "t5"], ["t1"]])]
    col = pa.chunked_array([c for e in encoded for c in e.chunks])
    expected = col.to_pandas()
    for order in (None, np.argsort(np.arange(len(col))[::-1] % 3, kind="stable")):
        got = pd.Series(load._categorical(col, None if order is None else load.places(order)))
        want = expected if order is None else pd.Series(pd.Categorical.from_codes(
            expected.cat.codes.to_numpy()[order], dtype=expected.dtype))
        assert got.dtype == want.dtype
        assert got.equals(want)
        assert list(got.cat.categories) == list(want.cat.categories)
