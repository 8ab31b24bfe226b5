"""`rushhour k8s`: the rendered manifests hang together; deploy/Dockerfile installs every package."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import rushhour

from rushhour.k8s import MASTER_PORT, K8sOptions, render
from rushhour.loadgen import runkey
from rushhour.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = """
name: k8s-render
target: {url: "http://gateway.inference.svc:80", profile: llm-d, model: m}
tiers:
  - {name: interactive, priority: 100}
personas:
  - {kind: chat, name: chat, tier: interactive, arrival: {rate: 2}}
phases:
  - {name: main, duration: 60s}
"""


def _docs(text: str) -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs) == 7
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"]
    return by_kind


def test_rendered_manifests_hang_together(tmp_path: Path) -> None:
    opts = K8sOptions(workers=8, image="registry.example/rushhour:0.1.0", namespace="load", secret="rushhour-keys",
                      target="http://llm-d-gateway.inference.svc:80",
                      worker_targets=["http://llm-d-gateway.inference.svc:80"])
    k = _docs(render(SCENARIO, opts))
    assert {d["metadata"]["namespace"] for d in k.values()} == {"load"}
    # the scenario travels whole and still loads
    (tmp_path / "s.yaml").write_text(k["ConfigMap"]["data"]["scenario.yaml"])
    assert load_scenario(tmp_path / "s.yaml").name == "k8s-render"
    job, svc, dep, pvc = k["Job"], k["Service"], k["Deployment"], k["PersistentVolumeClaim"]
    master_pod = job["spec"]["template"]
    assert master_pod["spec"]["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    # the Service selects the master pod, on the port the master listens on
    labels = master_pod["metadata"]["labels"]
    assert all(labels.get(key) == value for key, value in svc["spec"]["selector"].items())
    assert svc["spec"]["ports"][0]["port"] == MASTER_PORT
    (master,) = master_pod["spec"]["containers"]
    cmd = master["command"]
    assert cmd[:3] == ["rushhour", "run", "/scenario/scenario.yaml"]
    assert cmd[cmd.index("--expect-workers") + 1] == "8" and cmd[cmd.index("--master-bind") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--master-port") + 1] == str(MASTER_PORT)
    assert cmd[cmd.index("--target") + 1] == "http://llm-d-gateway.inference.svc:80"
    assert master["ports"][0]["containerPort"] == MASTER_PORT
    # volumes name the ConfigMap and the claim rendered beside them, and every mount has a volume
    volumes = {v["name"]: v for v in master_pod["spec"]["volumes"]}
    assert volumes["scenario"]["configMap"]["name"] == k["ConfigMap"]["metadata"]["name"]
    assert volumes["runs"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert {m["name"] for m in master["volumeMounts"]} <= set(volumes)
    # workers: N replicas whose selector matches their own labels, joining the Service by name
    assert dep["spec"]["replicas"] == 8
    wlabels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(wlabels.get(key) == value for key, value in dep["spec"]["selector"]["matchLabels"].items())
    assert not all(wlabels.get(key) == value for key, value in svc["spec"]["selector"].items())
    (worker,) = dep["spec"]["template"]["spec"]["containers"]
    assert worker["command"] == ["rushhour", "worker", "--master", f"{svc['metadata']['name']}:{MASTER_PORT}",
                                 "--target", "http://llm-d-gateway.inference.svc:80"]
    assert worker["resources"]["limits"]["cpu"] == "1"
    for container in (master, worker):
        assert container["image"] == "registry.example/rushhour:0.1.0"
        assert container["envFrom"] == [{"secretRef": {"name": "rushhour-keys"}}]


def test_the_run_secret_is_a_secret_and_only_workers_reach_the_master_port() -> None:
    opts = K8sOptions(workers=2, image="r/rh:1", worker_targets=["http://gw:80"])
    text = render(SCENARIO, opts)
    k = _docs(text)
    secret, policy = k["Secret"], k["NetworkPolicy"]
    value = secret["stringData"][runkey.SECRET_ENV]
    assert runkey.parse_secret(value) and value == opts.run_secret
    master_pod, worker_pod = k["Job"]["spec"]["template"], k["Deployment"]["spec"]["template"]
    for pod in (master_pod, worker_pod):
        (container,) = pod["spec"]["containers"]
        assert container["env"] == [{"name": runkey.SECRET_ENV, "valueFrom": {"secretKeyRef": {
            "name": secret["metadata"]["name"], "key": runkey.SECRET_ENV}}}]
        assert value not in " ".join(container["command"])  # never in argv
    # the policy selects the master pod and admits the worker pods alone, on the master port alone
    assert policy["spec"]["podSelector"]["matchLabels"] == master_pod["metadata"]["labels"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": worker_pod["metadata"]["labels"]}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": MASTER_PORT}] and policy["spec"]["policyTypes"] == ["Ingress"]
    assert render(SCENARIO, K8sOptions(workers=2, image="r/rh:1", worker_targets=["http://gw:80"])).count(value) == 0


@pytest.mark.parametrize("bad", [dict(workers=0), dict(name="Bad_Name"), dict(image="two words"),
                                 dict(namespace="x" * 60), dict(workers=10**6), dict(workers_wait_s=-1),
                                 dict(storage="lots"), dict(worker_cpu="1; rm"), dict(secret="Bad Name"),
                                 dict(worker_targets=[]), dict(worker_targets=["ftp://x"])])
def test_bad_options_are_refused(bad: dict[str, Any]) -> None:
    opts = {"workers": 2, "image": "r/rh:1", "worker_targets": ["http://gw:80"], **bad}
    with pytest.raises(ValueError):
        render(SCENARIO, K8sOptions(**opts))


def test_cli_refuses_the_embedded_testbed_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace('"http://gateway.inference.svc:80"', "testbed"))
    out = rushhour("k8s", path, "--workers", "2", timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error: the embedded testbed") and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "says"), [
    (["--target", "http://user:sk-live-secret-0123@gw:80"], "must not carry a user or password"),
    (["--duration", "soon"], "--duration"),
    (["--profile", "nope"], "unknown profile"),
    (["--workers", "0"], "--workers must be"),
])
def test_cli_validates_its_options_as_run_does(tmp_path: Path, args: list[str], says: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = rushhour("k8s", path, "--workers", "2", *args, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == "", out.stderr
    assert says in out.stderr and "sk-live-secret" not in out.stderr + out.stdout, out.stderr


def test_dockerfile_installs_every_package_of_the_wheel() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "only-include"]  # rushhour and the folders the wheel maps under it
    for package in packages:
        assert f"COPY {package}/ {package}/" in text, package
    assert "RUN pip install ." in text and 'ENTRYPOINT ["rushhour"]' in text and "USER 10001" in text


def test_dockerfile_copies_what_the_wheel_build_reads() -> None:
    # hatch refuses to build when a licence file or a force-included file is missing from the build context
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    hatch = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for name in ("LICENSE", "NOTICE"):  # hatch's default license files
        assert name in text.split("COPY pyproject.toml", 1)[1].splitlines()[0], name
    for source in hatch["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]:
        if source != "examples/Dockerfile":  # the image's own recipe is not needed inside it
            assert f"COPY {source} examples/" in text or f"COPY {source} " in text or f"COPY {source}/ " in text, source


def test_the_documented_dockerfile_is_the_shipped_one_and_builds_the_same_image() -> None:
    example = (ROOT / "examples" / "Dockerfile").read_text()
    docs = (ROOT / "docs" / "distributed.md").read_text()
    assert f"```dockerfile\n{example}```" in docs  # docs/distributed.md shows the shipped file as it is
    # from the unprivileged user on, the wheel's image and the checkout's are the same image
    tail = "# an unprivileged user"
    checkout = (ROOT / "deploy" / "Dockerfile").read_text()
    assert example[example.index(tail):] == checkout[checkout.index(tail):]
