"""``rushhour k8s``: the Kubernetes manifests of one multi-host run (master Job + Service, worker Deployment,
the run's Secret and a NetworkPolicy that admits only the run's worker pods to the master port)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from rushhour.loadgen import runkey

MASTER_PORT = 5557
MAX_WORKERS = 1000
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")  # a Kubernetes resource quantity


@dataclass
class K8sOptions:
    """What the manifests need besides the scenario file's text."""

    workers: int
    image: str
    name: str = "rushhour"
    namespace: str | None = None
    target: str | None = None
    profile: str | None = None
    duration: str | None = None
    secret: str | None = None  # every key becomes an environment variable (the scenario's env: credentials)
    workers_wait_s: float = 300.0
    storage: str = "5Gi"
    worker_cpu: str = "1"
    worker_memory: str = "1Gi"
    extra_run_args: list[str] = field(default_factory=list)
    # the URLs the workers may send to (their --target allow-list): the target and the fallback routes
    worker_targets: list[str] = field(default_factory=list)
    run_secret: str = field(default_factory=runkey.new_secret, repr=False)  # made per render: one run


def check(opts: K8sOptions) -> None:
    """ValueError with a one-line reason for options no cluster would accept."""
    if not 1 <= opts.workers <= MAX_WORKERS:
        raise ValueError(f"--workers must be 1..{MAX_WORKERS}")
    if not 0 < opts.workers_wait_s <= 24 * 3600:
        raise ValueError("--workers-wait must be more than 0 and at most a day (seconds)")
    for flag, value in (("storage", opts.storage), ("worker cpu", opts.worker_cpu),
                        ("worker memory", opts.worker_memory)):
        if not _QUANTITY.match(value):
            raise ValueError(f"{flag} {value!r}: not a Kubernetes quantity (e.g. 5Gi, 500m)")
    if opts.secret is not None and not _SECRET_NAME.match(opts.secret):
        raise ValueError(f"--secret {opts.secret!r}: not a valid Secret name")
    runkey.parse_secret(opts.run_secret)
    if not opts.worker_targets:
        raise ValueError("no target URL for the workers' allow-list: give --target URL")
    runkey.parse_allow(",".join(opts.worker_targets))
    if not _DNS.match(opts.name):
        raise ValueError(f"--name {opts.name!r}: lower-case letters, digits and '-', at most 42 characters")
    if opts.namespace is not None and not _DNS.match(opts.namespace):
        raise ValueError(f"--namespace {opts.namespace!r}: not a valid namespace name")
    if not opts.image or any(c.isspace() for c in opts.image):
        raise ValueError("--image: give an image with rushhour installed (`rushhour example dockerfile`), "
                         "e.g. registry/rushhour:0.1.0")


def render(scenario_text: str, opts: K8sOptions) -> str:
    """The manifests as one multi-document YAML (Secret, ConfigMap, NetworkPolicy, PVC, Service, Job, Deployment)."""
    check(opts)
    return yaml.dump_all(manifests(scenario_text, opts), Dumper=_Dumper, sort_keys=False, width=120)


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line texts (the scenario) as literal blocks, readable in the ConfigMap."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def manifests(scenario_text: str, opts: K8sOptions) -> list[dict[str, Any]]:
    """The manifests as dictionaries, in the order ``kubectl apply`` should see them."""
    name, n = opts.name, opts.workers
    master = f"{name}-master"
    meta = _meta(opts)
    labels = {"app.kubernetes.io/name": "rushhour", "app.kubernetes.io/instance": name}
    run_cmd = ["rushhour", "run", "/scenario/scenario.yaml", "--out", "/runs", "--expect-workers", str(n),
               "--master-bind", "0.0.0.0", "--master-port", str(MASTER_PORT),
               "--workers-wait", f"{opts.workers_wait_s:g}"]
    for flag, value in (("--target", opts.target), ("--profile", opts.profile), ("--duration", opts.duration)):
        if value:
            run_cmd += [flag, value]
    run_cmd += opts.extra_run_args
    env_from = [{"secretRef": {"name": opts.secret}}] if opts.secret else []
    run_secret = f"{name}-run-secret"
    # the run's secret from a Secret, never on a command line (any process can read another's argv)
    secret_env = [{"name": runkey.SECRET_ENV,
                   "valueFrom": {"secretKeyRef": {"name": run_secret, "key": runkey.SECRET_ENV}}}]
    master_container: dict[str, Any] = {
        "name": "master", "image": opts.image, "command": run_cmd, "env": secret_env,
        "ports": [{"name": "locust", "containerPort": MASTER_PORT}],
        "volumeMounts": [{"name": "scenario", "mountPath": "/scenario", "readOnly": True},
                         {"name": "runs", "mountPath": "/runs"}],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    if env_from:
        master_container["envFrom"] = env_from  # the scraper's metrics credential, the doctor's probes
    worker_container: dict[str, Any] = {
        "name": "worker", "image": opts.image,
        "command": ["rushhour", "worker", "--master", f"{master}:{MASTER_PORT}",
                    *(arg for url in opts.worker_targets for arg in ("--target", url))],
        "env": secret_env,
        # one Locust process per core: a worker saturated on CPU makes the run invalid, not slower
        "resources": {"requests": {"cpu": opts.worker_cpu, "memory": opts.worker_memory},
                      "limits": {"cpu": opts.worker_cpu, "memory": opts.worker_memory}},
    }
    if env_from:
        worker_container["envFrom"] = env_from  # the tiers' env: credentials are read where requests are sent
    master_labels = {**labels, "app.kubernetes.io/component": "master"}
    worker_labels = {**labels, "app.kubernetes.io/component": "worker"}
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta(run_secret, labels), "type": "Opaque",
         "stringData": {runkey.SECRET_ENV: opts.run_secret}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{name}-scenario", labels),
         "data": {"scenario.yaml": scenario_text}},
        # the master port admits only this run's worker pods (the port hands out the scenario and takes records)
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(f"{master}-port", labels),
         "spec": {"podSelector": {"matchLabels": master_labels}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"podSelector": {"matchLabels": worker_labels}}],
                               "ports": [{"protocol": "TCP", "port": MASTER_PORT}]}]}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(f"{name}-runs", labels),
         "spec": {"accessModes": ["ReadWriteOnce"],  # only the master writes: shards arrive over Locust
                  "resources": {"requests": {"storage": opts.storage}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(master, labels),
         "spec": {"selector": master_labels,
                  "ports": [{"name": "locust", "port": MASTER_PORT, "targetPort": MASTER_PORT}]}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(master, labels),
         "spec": {"backoffLimit": 0, "template": {
             "metadata": {"labels": master_labels},
             "spec": {"restartPolicy": "Never", "containers": [master_container], "volumes": [
                 {"name": "scenario", "configMap": {"name": f"{name}-scenario"}},
                 {"name": "runs", "persistentVolumeClaim": {"claimName": f"{name}-runs"}}]}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(f"{name}-worker", labels),
         "spec": {"replicas": n,
                  "selector": {"matchLabels": worker_labels},
                  "template": {
                      "metadata": {"labels": worker_labels},
                      # SIGTERM: in-flight attempts are recorded cancelled, the shard is closed and shipped
                      "spec": {"terminationGracePeriodSeconds": 30, "containers": [worker_container]}}}},
    ]


def _meta(opts: K8sOptions) -> Any:
    def meta(name: str, labels: dict[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "labels": dict(labels)}
        if opts.namespace:
            out["namespace"] = opts.namespace
        return out

    return meta
