"""A distribution's compiled sampler draws exactly what the model's own rules draw, from the same stream."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import TypeAdapter

from rushhour.scenarios.distributions import Distribution, Mixture, _Dist
from rushhour.scenarios.model import AgentSwarmPersona

SPECS: list[Any] = [
    3,
    {"dist": "constant", "value": 7.5, "max": 5},
    {"dist": "uniform", "low": 2000, "high": 10000},
    {"dist": "exponential", "mean": 2.0, "max": 30.0},
    {"dist": "lognormal", "median": 214, "sigma": 1.0, "min": 16, "max": 4000},
    {"dist": "lognormal", "mu": 1.5, "sigma": 0.0},
    {"dist": "gamma", "shape": 0.5, "mean": 3.0},
    {"dist": "pareto", "alpha": 1.5, "xm": 2.0, "max": 100},
    {"dist": "poisson", "mean": 1.0, "offset": 1, "max": 5},
    {"dist": "geometric", "mean": 6.8, "offset": 1, "max": 100},
    {"dist": "geometric", "mean": 0, "offset": 2},
    {"dist": "uniform", "low": 0, "high": 10, "min": 8, "max": 4},  # min above max: max wins, as before
    {"dist": "mixture", "parts": [
        {"weight": 0.96, "dist": {"dist": "lognormal", "median": 0.3, "sigma": 2.5, "max": 60}},
        {"weight": 0.04, "dist": {"dist": "uniform", "low": 60, "high": 600}}], "min": 0.01},
]


def reference(dist: Any, rng: random.Random) -> float:
    """``sample`` as the models drew before samplers existed: ``_raw``, then the clip (mixtures recursively)."""
    if isinstance(dist, Mixture):
        total = sum(p.weight for p in dist.parts)
        pick = rng.random() * total
        for part in dist.parts:
            pick -= part.weight
            if pick <= 0:
                value = reference(part.dist, rng)
                break
        else:
            value = reference(dist.parts[-1].dist, rng)
    else:
        value = type(dist)._raw(dist, rng)
    if dist.min is not None and value < dist.min:
        value = dist.min
    if dist.max is not None and value > dist.max:
        value = dist.max
    return value


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: str(s)[:40])
def test_sampler_draws_the_models_values(spec: Any) -> None:
    dist = TypeAdapter(Distribution).validate_python(spec if isinstance(spec, dict) else
                                                     {"dist": "constant", "value": spec})
    assert isinstance(dist, _Dist)
    for seed in range(50):
        a, b, c = random.Random(seed), random.Random(seed), random.Random(seed)
        draws = [reference(dist, a) for _ in range(40)]
        assert [dist.sampler()(b) for _ in range(40)] == draws
        assert [dist.sample_int(c, lowest=1) for _ in range(40)] == [max(1, round(x)) for x in draws]
        assert a.random() == b.random() == c.random()  # the stream is left where it was
        for lowest in (0, 1, 20):  # the int samplers (one function for some kinds): the rounded draws
            d, e = random.Random(seed), random.Random(seed)
            want = [max(lowest, round(reference(dist, d))) for _ in range(40)]
            assert [dist.int_sampler(lowest)(e) for _ in range(40)] == want
            assert d.random() == e.random()


def test_a_swarms_default_plan_draws_the_same() -> None:
    persona = AgentSwarmPersona(kind="agent_swarm", name="s", tier="t")
    for field in ("steps", "fanout", "tool_time_s", "append_tokens", "output_tokens", "task_context_tokens"):
        dist = getattr(persona, field)
        a, b = random.Random(9), random.Random(9)
        assert [dist.int_sampler(1)(a) for _ in range(500)] == [max(1, round(reference(dist, b))) for _ in range(500)]


def test_a_distributions_ceiling_is_the_largest_value_it_can_draw() -> None:
    """What a socket budget rests on (a swarm's widest fan-out): the clip, else the distribution's own top."""
    import math

    from pydantic import TypeAdapter

    from rushhour.scenarios.distributions import Distribution

    def ceiling(spec: dict[str, object]) -> float:
        return TypeAdapter(Distribution).validate_python(spec).ceiling()

    assert ceiling({"dist": "constant", "value": 3}) == 3
    assert ceiling({"dist": "uniform", "low": 1, "high": 7}) == 7
    assert ceiling({"dist": "uniform", "low": 1, "high": 7, "max": 5}) == 5
    assert ceiling({"dist": "lognormal", "median": 2, "sigma": 1}) == math.inf
    assert ceiling({"dist": "lognormal", "median": 2, "sigma": 1, "max": 40}) == 40
    mixture = {"dist": "mixture", "parts": [{"weight": 0.85, "dist": {"dist": "constant", "value": 1}},
                                            {"weight": 0.15, "dist": {"dist": "uniform", "low": 2, "high": 5}}]}
    assert ceiling(mixture) == 5
