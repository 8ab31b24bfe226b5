"""Config loading: defaults, overrides and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rushhour.testbed.config import ConfigError, load_config


def test_defaults() -> None:
    cfg = load_config(None)
    assert cfg.profile == "llm-d" and cfg.flow_control.objectives["interactive"] == 100


def test_yaml_and_overrides(tmp_path: Path) -> None:
    p = tmp_path / "tb.yaml"
    p.write_text("profile: vllm\nreplicas: 3\nflow_control:\n  ttl_s: 5\n"
                 "  bands:\n    - {priority: 0, max_requests: 7}\n"
                 "faults:\n  - {kind: replica_down, at_s: 1, duration_s: 2, replica: 0}\n")
    cfg = load_config(p, replicas=4)
    assert cfg.profile == "vllm" and cfg.replicas == 4
    assert cfg.flow_control.ttl_s == 5.0 and cfg.flow_control.bands[0].max_requests == 7
    assert cfg.faults[0].kind == "replica_down"


@pytest.mark.parametrize(("text", "needle"), [
    ("flow_control:\n  ttl: 5\n", "flow_control.ttl: unknown key"),
    ("replicas: two\n", "replicas: expected an integer"),
    ("profile: nginx\n", "profile: unknown 'nginx'"),
    ("faults:\n  - {kind: meteor}\n", "faults[0].kind"),
    ("flow_control:\n  bands:\n    - {max_requests: 3}\n", "flow_control.bands[0]"),
    ("- a\n", "top level must be a mapping"),
])
def test_errors_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert needle in str(exc.value)
