"""Numeric command-line flags checked in one place: a typer callback per kind refuses inf, NaN, a value out
of its range or an absurd count with one line and exit 2, before the verb starts anything."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import typer

Bound = float | Callable[[], float]  # a limit, or where to read it when the verb runs (the CLI imports stay lazy)

EXIT_USAGE = 2
MAX_SEED = 2**63 - 1  # seeds feed 64-bit generators
MAX_PROCESSES = 1_024  # Locust processes on one machine
MAX_PORT = 65_535
MAX_WAIT_S = 86_400.0  # one day
MAX_PRICE = 1e9  # of one GPU-hour: any currency, any GPU
MAX_GPUS_PER_REPLICA = 1_024


def _model_limit(name: str) -> Callable[[], float]:
    """A limit of ``scenarios.model``, read when a verb's flags are checked (importing it costs 150 ms)."""

    def read() -> float:
        from rushhour.scenarios import model

        return float(getattr(model, name))

    return read


def _value(bound: Bound) -> float:
    return bound() if callable(bound) else bound


def _shown(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _refuse(flag: str, message: str) -> typer.Exit:
    from rushhour.consoles import make_console

    make_console(stderr=True).print(f"[bold red]error:[/] {flag} {message}", highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_USAGE)


def number(flag: str, low: float, bound: Bound, *, above: bool = False, below: bool = False) -> Callable[[Any], Any]:
    """A callback for ``flag``: a finite number from ``low`` to ``bound`` (``above``/``below``: the bound excluded)."""
    left, right = "(" if above else "[", ")" if below else "]"

    def check(value: Any) -> Any:
        if value is None:
            return value
        high = _value(bound)
        ok = math.isfinite(value) and (value > low if above else value >= low) and (
            value < high if below else value <= high)
        if not ok:
            raise _refuse(flag, f"takes a finite number in {left}{_shown(low)}, {_shown(high)}{right}, got {value:g}")
        return value

    return check


def count(flag: str, low: int, bound: Bound) -> Callable[[Any], Any]:
    """A callback for ``flag``: a whole number from ``low`` to ``bound``."""

    def check(value: Any) -> Any:
        high = int(_value(bound))
        if value is not None and not low <= value <= high:
            raise _refuse(flag, f"takes a count from {low:,} to {high:,}, got {value:,}")
        return value

    return check


def tier_counts(text: str) -> tuple[int, ...]:
    """``study --k 1,2,4``: distinct tier counts from 1 to ``MAX_LADDER``, at most ``MAX_LADDER`` of them."""
    from rushhour.scenarios.model import MAX_LADDER

    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        values = []
    if not values or not 1 <= values[0] <= values[-1] <= MAX_LADDER or len(values) > MAX_LADDER:
        raise ValueError(f"--k {text!r}: a list of tier counts from 1 to {MAX_LADDER}, e.g. 1,2,4")
    return tuple(values)


_LADDER = _model_limit("MAX_LADDER")
_SCALE = _model_limit("MAX_SCALE")
seed = count("--seed", 0, MAX_SEED)
processes = count("--processes", 1, MAX_PROCESSES)
steps = count("--steps", 1, _LADDER)
scale = number("--scale", 0, _SCALE, above=True)
target_scale = number("--target-scale", 0, _SCALE, above=True)
sim_replicas = count("--replicas", 1, _model_limit("MAX_SIM_REPLICAS"))
port = count("--master-port", 1, MAX_PORT)
workers_wait = number("--workers-wait", 0, MAX_WAIT_S, above=True)
expect_workers = count("--expect-workers", 0, MAX_PROCESSES)
gpu_hour_price = number("--gpu-hour-price", 0, MAX_PRICE)
gpus_per_replica = count("--gpus-per-replica", 1, MAX_GPUS_PER_REPLICA)
precision = number("--precision", 0, 1, above=True, below=True)
max_probes = count("--max-probes", 1, _LADDER)
repeats = count("--repeats", 0, _LADDER)
alpha = number("--alpha", 0, 1, above=True, below=True)
latency_threshold = number("--latency-threshold", 0, 100)
drop_threshold = number("--drop-threshold", 0, 1)
fillers = count("--fillers", 0, 1_000)
testbed_replicas = count("--replicas", 1, _model_limit("MAX_REPLICAS"))
speed = number("--speed", 0, _SCALE, above=True)
peak = number("--peak", 1, 100)  # plan --from-planner: the chat peak × the planner's rate
batch_agents = count("--batch-agents", 0, _model_limit("MAX_AGENTS"))
