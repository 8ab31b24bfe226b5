"""The run's secret, the tags of master↔worker frames and a worker's allow-list (loadgen/runkey.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import cli_command

from rushhour.loadgen import runkey
from rushhour.loadgen.distributed import worker_env
from rushhour.loadgen.testbed_proc import child_env

RUSHHOUR = cli_command()


def test_a_tag_covers_every_field_and_their_boundaries() -> None:
    key = runkey.parse_secret(runkey.new_secret())
    mac = runkey.tag(key, b"w2m", b"session", "worker-1", 7, "rh_finished", b"payload")
    assert runkey.verify(key, mac, b"w2m", b"session", "worker-1", 7, "rh_finished", b"payload")
    for changed in ((b"m2w", b"session", "worker-1", 7, "rh_finished", b"payload"),  # direction
                    (b"w2m", b"session", "worker-2", 7, "rh_finished", b"payload"),  # sender
                    (b"w2m", b"session", "worker-1", 8, "rh_finished", b"payload"),  # sequence
                    (b"w2m", b"session", "worker-1", 7, "rh_refused", b"payload"),  # type
                    (b"w2m", b"sessio", "nworker-1", 7, "rh_finished", b"payload")):  # a moved boundary
        assert not runkey.verify(key, mac, *changed)
    other = runkey.parse_secret(runkey.new_secret())
    assert not runkey.verify(other, mac, b"w2m", b"session", "worker-1", 7, "rh_finished", b"payload")
    assert not runkey.verify(key, "not bytes", b"w2m")


@pytest.mark.parametrize("bad", [None, "", "abc", "zz" * 20, "a" * 33])
def test_a_missing_or_weak_secret_is_one_line_that_never_echoes_it(bad: str | None) -> None:
    with pytest.raises(ValueError) as info:
        runkey.parse_secret(bad)
    assert runkey.SECRET_ENV in str(info.value) and "\n" not in str(info.value)
    assert not bad or bad not in str(info.value)


def test_run_ids_a_master_may_name_a_spool_folder_by() -> None:
    assert runkey.safe_run_id("20261206T050803Z-cc678c") == "20261206T050803Z-cc678c"
    for bad in ("../../escaped", "/etc", "a/b", ".hidden", "", None, 5, "x" * 200):
        assert runkey.safe_run_id(bad) is None


def test_the_allow_list_admits_origins_not_prefixes() -> None:
    allow = runkey.parse_allow("http://gw.internal:8080, https://api.example.com, http://127.0.0.1:*")
    assert runkey.not_allowed(["http://gw.internal:8080/v1", "https://api.example.com:443/x",
                               "http://127.0.0.1:41234"], allow) == []
    refused = ["http://gw.internal:8081", "https://gw.internal:8080", "http://gw.internal.evil:8080",
               "http://api.example.com", "http://10.0.0.1:80", "not a url"]
    assert runkey.not_allowed(refused, allow) == refused
    with pytest.raises(ValueError, match="not an http"):
        runkey.parse_allow("ftp://x")


def test_worker_env_needs_the_secret_and_an_allow_list(tmp_path: Path) -> None:
    secret = {runkey.SECRET_ENV: runkey.new_secret()}
    env = worker_env(secret, ["http://gw:80"], tmp_path / "spool")
    assert env[runkey.TARGETS_ENV] == "http://gw:80" and env["RUSHHOUR_SPOOL"] == str((tmp_path / "spool").resolve())
    assert worker_env({**secret, runkey.TARGETS_ENV: "http://a:1"}, ["http://b:2"])[runkey.TARGETS_ENV] == (
        "http://a:1,http://b:2")
    with pytest.raises(ValueError, match="--target"):
        worker_env(secret, [])
    with pytest.raises(ValueError, match=runkey.SECRET_ENV):
        worker_env({}, ["http://gw:80"])


@pytest.mark.parametrize(("args", "env", "says"), [
    (["worker", "--master", "127.0.0.1:1", "--target", "http://gw:80"], {}, f"{runkey.SECRET_ENV} is not set"),
    (["worker", "--master", "127.0.0.1:1"], {runkey.SECRET_ENV: "ab" * 16}, "give --target URL"),
    (["run", "demo", "--expect-workers", "1", "--dry-run"], {}, f"{runkey.SECRET_ENV} is not set"),
])
def test_the_cli_refuses_without_the_secret_in_one_line(args: list[str], env: dict[str, str], says: str) -> None:
    base = {k: v for k, v in child_env().items() if k not in (runkey.SECRET_ENV, runkey.TARGETS_ENV)}
    out = subprocess.run([*RUSHHOUR, *args], capture_output=True, text=True, env={**base, **env}, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert says in out.stderr, out.stderr
