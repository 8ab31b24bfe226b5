#!/usr/bin/env bash
#
# rushhour as an llm-d-benchmark harness (deploy/llm-d-benchmark/README.md in rushhour's repository).
# llm-d-benchmark mounts this folder at /workspace/harnesses and runs this script as the harness pod's
# entrypoint (harness.entrypoint), in an image with rushhour installed (images.benchmark). It reads the
# rendered profile /workspace/profiles/rushhour/<workload>.yaml (a rushhour scenario), sends its load to
# the stack llm-d-benchmark deployed, and leaves in the results folder:
#   benchmark_report_v0.2,_rushhour.yaml   the run as benchmark report v0.2 (every tier under
#                                          results.observability.rushhour)
#   run_metadata.yaml                      the keys llm-d-benchmark's own harness scripts write
#   runs/<run id>/                         rushhour's run folder (records, summary.json, report.html, ...)
#   stdout.log, stderr.log
# Exit status: rushhour run's (0: the run kept its schedule, whatever its SLO verdicts: those are in the report),
# else the report's; 1 when no report could be written.
set -uo pipefail

results_dir="${LLMDBENCH_RUN_EXPERIMENT_RESULTS_DIR:?must be set by llm-d-benchmark}"
workspace="${LLMDBENCH_RUN_WORKSPACE_DIR:-/workspace}"
workload="${LLMDBENCH_RUN_EXPERIMENT_HARNESS_WORKLOAD_NAME:?must be set by llm-d-benchmark}"
workload="${workload%.yaml}.yaml"  # llm-d-benchmark.sh appends .yaml the same way
scenario="${workspace}/profiles/rushhour/${workload}"
endpoint="${LLMDBENCH_HARNESS_STACK_ENDPOINT_URL:?endpoint not provided}"
endpoint="${endpoint%/}"
endpoint="${endpoint%/v1}"  # rushhour's target is the server's root: it adds /v1/... itself
report="${results_dir}/benchmark_report_v0.2,_rushhour.yaml"
# more `rushhour run` flags, e.g. RUSHHOUR_ARGS="--processes 2 --duration 2m" (harness.extraEnvVars)
read -r -a extra <<< "${RUSHHOUR_ARGS:-}"

mkdir -p "${results_dir}"
if [[ ! -f "${scenario}" ]]; then
  echo "rushhour harness: no profile ${scenario} (harness.experimentProfile names one in profiles/rushhour/)" >&2
  exit 1
fi

start="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
start_s="$(date +%s.%N)"
rushhour run "${scenario}" --target "${endpoint}" --out "${results_dir}/runs" ${extra[@]+"${extra[@]}"} \
  > >(tee "${results_dir}/stdout.log") 2> >(tee "${results_dir}/stderr.log" >&2)
rc=$?
stop="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
stop_s="$(date +%s.%N)"

# the newest run folder this harness wrote (one per pod run)
run_dir="$(ls -1dt "${results_dir}"/runs/*/ 2>/dev/null | head -n 1)"
if [[ -n "${run_dir}" && -f "${run_dir}/summary.json" ]]; then
  rushhour report "${run_dir}" --format br0.2 --out "${report}" \
    --experiment-id "${LLMDBENCH_RUN_EXPERIMENT_ID:-}" >> "${results_dir}/stdout.log" 2>> "${results_dir}/stderr.log"
  report_rc=$?
else
  echo "rushhour harness: the run wrote no summary (rushhour run exit ${rc}); no benchmark report" >&2
  report_rc=1
fi
if [[ ${rc} -eq 0 ]]; then
  rc=${report_rc}
fi

# run_metadata.yaml: the hand-off llm-d-benchmark's analysis reads (its harness scripts' keys), written by
# Python's YAML writer so free text is quoted whatever it holds
HARNESS_RC="${rc}" HARNESS_START="${start}" HARNESS_STOP="${stop}" \
HARNESS_DELTA="PT$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 3))" \
  "${start_s}" "${stop_s}")S" RESULTS_DIR="${results_dir}" python3 - <<'PY'
import os
from importlib.metadata import PackageNotFoundError, version

import yaml

env = os.environ.get
try:
    installed = version("rushhour")
except PackageNotFoundError:
    installed = ""
metadata = {
    "harness_start": env("HARNESS_START", ""),
    "harness_stop": env("HARNESS_STOP", ""),
    "harness_delta": env("HARNESS_DELTA", ""),
    "harness_args": f"run {env('LLMDBENCH_RUN_EXPERIMENT_HARNESS_WORKLOAD_NAME', '')}",
    "harness_version": installed or "unknown",
    "harness_name": "rushhour",
    "harness_workload": env("LLMDBENCH_RUN_EXPERIMENT_HARNESS_WORKLOAD_NAME", ""),
    "harness_rc": env("HARNESS_RC", ""),
    "experiment_id": env("LLMDBENCH_RUN_EXPERIMENT_ID", ""),
    "model": env("LLMDBENCH_DEPLOY_CURRENT_MODEL", ""),
    "endpoint_url": env("LLMDBENCH_HARNESS_STACK_ENDPOINT_URL", ""),
    "namespace": env("LLMDBENCH_VLLM_COMMON_NAMESPACE", ""),
    "description_text": env("LLMDBENCH_DESCRIPTION_TEXT", ""),
    "description_keywords": env("LLMDBENCH_DESCRIPTION_KEYWORDS", ""),
}
with open(os.path.join(env("RESULTS_DIR", "."), "run_metadata.yaml"), "w", encoding="utf-8") as out:
    yaml.safe_dump(metadata, out, sort_keys=False)
PY

if [[ ${report_rc} -eq 0 ]]; then
  echo "rushhour harness: exit ${rc}; benchmark report: ${report}"
else
  echo "rushhour harness: exit ${rc}; no benchmark report" >&2
fi
exit "${rc}"
