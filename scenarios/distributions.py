"""Seeded distributions for every workload parameter, as scenario models that can sample themselves.

Sampling uses the stdlib ``random.Random`` only, so Locust processes never import numpy. Each
spec is written in YAML either as a bare number (a constant) or as a mapping with ``dist:``::

    think_time_s: {dist: lognormal, median: 30, sigma: 1.0, max: 600}
    fanout: {dist: mixture, parts: [{weight: 0.85, dist: {dist: constant, value: 1}}, ...]}
"""

from __future__ import annotations

import csv
import functools
import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# distribution id -> (the distribution, its sampler); see _Dist.sampler
_SAMPLERS: dict[int, tuple[Any, Callable[[random.Random], float]]] = {}
_NV_MAGICCONST = 4 * math.exp(-0.5) / math.sqrt(2.0)  # random.NV_MAGICCONST, as the stdlib computes it


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min: float | None = Field(default=None, description="clip samples below this value")
    max: float | None = Field(default=None, description="clip samples above this value")

    def _raw(self, rng: random.Random) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _top(self) -> float:
        """The largest value the distribution itself draws, before the clip (inf: unbounded)."""
        return math.inf

    def ceiling(self) -> float:
        """The largest value a draw can take: its ``max``, else the distribution's own top (inf: unbounded)."""
        return min(self._top(), self.max if self.max is not None else math.inf)

    def _raw_fn(self) -> Callable[[random.Random], float]:
        """``_raw`` with the parameters bound (a closure: no model attribute reads per draw)."""
        return self._raw

    def _fused(self, low: float, high: float, lowest: int | None) -> Callable[[random.Random], Any] | None:
        """The sampler as one function, the clip to [low, high] (and ``max(lowest, round(·))`` when ``lowest`` is
        given) built in, or None where the layers below do it: a storm's task plans draw millions of values,
        and each layer is a call."""
        return None

    def sampler(self) -> Callable[[random.Random], float]:
        """``sample`` as a plain function of the rng, built once per distribution: the same draws from the same
        stream (an agent's task plan draws about fifty values; the simulator plans thousands of tasks a second)."""
        got = _SAMPLERS.get(id(self))
        if got is not None:
            return got[1]
        lo, hi = self.min, self.max
        low = -math.inf if lo is None else lo
        high = math.inf if hi is None else hi
        fn: Callable[[random.Random], float] | None = self._fused(low, high, None)
        if fn is None:
            raw = self._raw_fn()
            if lo is None and hi is None:
                fn = raw
            else:

                def fn(rng: random.Random) -> float:
                    value = raw(rng)
                    if value < low:
                        value = low
                    if value > high:
                        value = high
                    return value

        _SAMPLERS[id(self)] = (self, fn)  # the model is kept alive: its id is never reused for another
        return fn

    def int_sampler(self, lowest: int = 0) -> Callable[[random.Random], int]:
        """``sample_int`` as a plain function of the rng."""
        low = -math.inf if self.min is None else self.min
        high = math.inf if self.max is None else self.max
        fused = self._fused(low, high, lowest)
        if fused is not None:
            return fused
        fn = self.sampler()
        return lambda rng: max(lowest, round(fn(rng)))

    def sample(self, rng: random.Random) -> float:
        """One draw, clipped to [min, max]."""
        return self.sampler()(rng)

    def sample_int(self, rng: random.Random, lowest: int = 0) -> int:
        return max(lowest, round(self.sampler()(rng)))

    def mean_estimate(self) -> float:
        """Expected value (before clipping), used by dry runs and planning."""
        rng = random.Random(12345)
        return sum(self.sample(rng) for _ in range(2000)) / 2000


class Constant(_Dist):
    dist: Literal["constant"] = "constant"
    value: float

    def _raw(self, rng: random.Random) -> float:
        return self.value

    def _raw_fn(self) -> Callable[[random.Random], float]:
        value = self.value
        return lambda rng: value

    def _fused(self, low: float, high: float, lowest: int | None) -> Callable[[random.Random], Any] | None:
        value: float = self.value
        if value < low:
            value = low
        if value > high:
            value = high
        out = value if lowest is None else max(lowest, round(value))  # draws nothing: the same every time
        return lambda rng: out

    def mean_estimate(self) -> float:
        return self.value

    def _top(self) -> float:
        return self.value


class Uniform(_Dist):
    dist: Literal["uniform"]
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.high < self.low:
            raise ValueError("uniform needs low <= high")
        return self

    def _raw(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def _top(self) -> float:
        return self.high

    def _raw_fn(self) -> Callable[[random.Random], float]:
        low, high = self.low, self.high
        return lambda rng: rng.uniform(low, high)


class Exponential(_Dist):
    dist: Literal["exponential"]
    mean: float = Field(gt=0)

    def _raw(self, rng: random.Random) -> float:
        return rng.expovariate(1.0 / self.mean)

    def _raw_fn(self) -> Callable[[random.Random], float]:
        lambd = 1.0 / self.mean
        return lambda rng: rng.expovariate(lambd)


class LogNormal(_Dist):
    """Log-normal given by its median (e^mu) and sigma of ln, or by mu directly."""

    dist: Literal["lognormal"]
    median: float | None = Field(default=None, gt=0)
    mu: float | None = None
    sigma: float = Field(ge=0)

    @model_validator(mode="after")
    def _one_location(self) -> LogNormal:
        if (self.median is None) == (self.mu is None):
            raise ValueError("lognormal needs exactly one of median or mu")
        return self

    @property
    def location(self) -> float:
        return self.mu if self.mu is not None else math.log(self.median or 1.0)

    def _raw(self, rng: random.Random) -> float:
        return rng.lognormvariate(self.location, self.sigma)

    def _raw_fn(self) -> Callable[[random.Random], float]:
        mu, sigma = self.location, self.sigma
        return lambda rng: rng.lognormvariate(mu, sigma)

    def _fused(self, low: float, high: float, lowest: int | None) -> Callable[[random.Random], Any] | None:
        mu, sigma = self.location, self.sigma
        exp, log, magic = math.exp, math.log, _NV_MAGICCONST

        def draw(rng: random.Random) -> Any:
            # rng.lognormvariate(mu, sigma) inlined: the stdlib's normalvariate (Kinderman and Monahan), the
            # same operations in the same order on the same stream
            rand = rng.random
            while True:
                u1 = rand()
                u2 = 1.0 - rand()
                z = magic * (u1 - 0.5) / u2
                zz = z * z / 4.0
                if zz <= -log(u2):
                    break
            value = exp(mu + z * sigma)
            if value < low:
                value = low
            if value > high:
                value = high
            return value if lowest is None else max(lowest, round(value))

        return draw


class Gamma(_Dist):
    """Gamma by shape and mean (shape < 1 is burstier than Poisson; shape 1 is exponential)."""

    dist: Literal["gamma"]
    shape: float = Field(gt=0)
    mean: float = Field(gt=0)

    def _raw(self, rng: random.Random) -> float:
        return rng.gammavariate(self.shape, self.mean / self.shape)

    def _raw_fn(self) -> Callable[[random.Random], float]:
        shape, scale = self.shape, self.mean / self.shape
        return lambda rng: rng.gammavariate(shape, scale)


class Pareto(_Dist):
    """Pareto with scale ``xm`` (the minimum) and tail index ``alpha``."""

    dist: Literal["pareto"]
    alpha: float = Field(gt=0)
    xm: float = Field(gt=0)

    def _raw(self, rng: random.Random) -> float:
        return self.xm * rng.paretovariate(self.alpha)

    def _raw_fn(self) -> Callable[[random.Random], float]:
        xm, alpha = self.xm, self.alpha
        return lambda rng: xm * rng.paretovariate(alpha)


class Poisson(_Dist):
    """A count with Poisson law (Knuth's method; fine for small means)."""

    dist: Literal["poisson"]
    mean: float = Field(ge=0)
    offset: int = 0

    def _raw(self, rng: random.Random) -> float:
        limit, k, p = math.exp(-self.mean), 0, 1.0
        while True:
            p *= rng.random()
            if p <= limit:
                return float(k + self.offset)
            k += 1

    def _raw_fn(self) -> Callable[[random.Random], float]:
        limit, offset = math.exp(-self.mean), self.offset

        def draw(rng: random.Random) -> float:
            k, p, rand = 0, 1.0, rng.random
            while True:
                p *= rand()
                if p <= limit:
                    return float(k + offset)
                k += 1

        return draw


class Geometric(_Dist):
    """Number of failures before the first success, plus ``offset`` (mean = offset + (1-p)/p)."""

    dist: Literal["geometric"]
    mean: float = Field(ge=0, description="mean of the geometric part")
    offset: int = 0

    def _raw(self, rng: random.Random) -> float:
        if self.mean == 0:
            return float(self.offset)
        p = 1.0 / (1.0 + self.mean)
        return float(self.offset + int(math.log(1.0 - rng.random()) / math.log(1.0 - p)))

    def _raw_fn(self) -> Callable[[random.Random], float]:
        if self.mean == 0:
            return self._raw
        offset, log_q, log = self.offset, math.log(1.0 - 1.0 / (1.0 + self.mean)), math.log
        return lambda rng: float(offset + int(log(1.0 - rng.random()) / log_q))


class Empirical(_Dist):
    """Draws from the values of one column of a trace file (CSV, or JSON lines)."""

    dist: Literal["empirical"]
    trace: str
    column: str
    scale: float = 1.0

    def _raw(self, rng: random.Random) -> float:
        return rng.choice(_trace_column(self.trace, self.column)) * self.scale


class Mixture(_Dist):
    dist: Literal["mixture"]
    parts: list[MixturePart] = Field(min_length=1)

    def _top(self) -> float:
        return max(part.dist.ceiling() for part in self.parts)

    def _raw(self, rng: random.Random) -> float:
        total = sum(p.weight for p in self.parts)
        pick = rng.random() * total
        for part in self.parts:
            pick -= part.weight
            if pick <= 0:
                return part.dist.sample(rng)
        return self.parts[-1].dist.sample(rng)

    def _raw_fn(self) -> Callable[[random.Random], float]:
        total = sum(p.weight for p in self.parts)
        parts = [(p.weight, p.dist.sampler()) for p in self.parts]
        last = parts[-1][1]

        def draw(rng: random.Random) -> float:
            pick = rng.random() * total
            for weight, fn in parts:
                pick -= weight
                if pick <= 0:
                    return fn(rng)
            return last(rng)

        return draw

    def _fused(self, low: float, high: float, lowest: int | None) -> Callable[[random.Random], Any] | None:
        total = sum(p.weight for p in self.parts)
        parts = [(p.weight, p.dist.sampler()) for p in self.parts]
        last = parts[-1][1]

        def draw(rng: random.Random) -> Any:
            pick = rng.random() * total
            for weight, fn in parts:
                pick -= weight
                if pick <= 0:
                    value = fn(rng)
                    break
            else:
                value = last(rng)
            if value < low:
                value = low
            if value > high:
                value = high
            return value if lowest is None else max(lowest, round(value))

        return draw


DistSpec = Annotated[
    Constant | Uniform | Exponential | LogNormal | Gamma | Pareto | Poisson | Geometric | Empirical | Mixture,
    Field(discriminator="dist"),
]


class MixturePart(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    weight: float = Field(gt=0)
    dist: Distribution

    @field_validator("dist", mode="before")
    @classmethod
    def _bare_number(cls, value: Any) -> Any:
        return as_dist_input(value)


def as_dist_input(value: Any) -> Any:
    """Let a bare number stand for a constant distribution."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"dist": "constant", "value": value}
    return value


Distribution = Annotated[DistSpec, Field(description="a number, or {dist: NAME, ...}")]
Mixture.model_rebuild()
MixturePart.model_rebuild()


@functools.lru_cache(maxsize=32)
def _trace_column(trace: str, column: str) -> list[float]:
    path = resolve_trace_path(trace)
    values: list[float] = []
    if path.suffix == ".csv":
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is None or column not in reader.fieldnames:
                raise ValueError(f"{path}: no column {column!r} (has {reader.fieldnames})")
            values = [float(row[column]) for row in reader if row.get(column)]
    else:
        with path.open() as handle:
            for line in handle:
                if line.strip():
                    obj = json.loads(line)
                    if column in obj:
                        values.append(float(obj[column]))
    if not values:
        raise ValueError(f"{path}: column {column!r} has no values")
    return values


# Real public traces ship with rushhour (scenarios/traces/, licences in its README), so a trace is
# found by its bare name from any working directory.
BUNDLED_TRACES = Path(__file__).resolve().parent / "traces"
BUNDLED_DATASETS = Path(__file__).resolve().parent / "datasets"  # conversation datasets (loadgen/datasets.py)
TRACE_SEARCH_DIRS = [Path.cwd(), BUNDLED_TRACES]


def resolve_trace_path(trace: str) -> Path:
    """A trace path as given, else relative to the shared traces folder next to the checkout."""
    path = Path(trace).expanduser()
    if path.exists():
        return path
    for base in TRACE_SEARCH_DIRS:
        candidate = base / trace
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"trace file {trace!r} not found (looked in {[str(d) for d in TRACE_SEARCH_DIRS]})")
