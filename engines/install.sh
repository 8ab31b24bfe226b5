#!/usr/bin/env bash
# Install the real engine releases the `real` tests run against, each in its own venv (never the project's):
#   engines/install.sh {all|vllm|litellm|RELEASE...}
# all: every release in engines/releases.toml; vllm / litellm: that engine's pinned release; RELEASE: a
# listed release by name (vllm-0.31.0). Each goes into ${RUSHHOUR_ENGINES:-$HOME/.cache/rushhour/engines}/
# <engine>-<version>. Idempotent: a stamp holds the hash of the release's lock file, so a second call returns
# at once and a changed lock reinstalls. Never downloads a model: vLLM serves a tiny random-weight Llama
# that engines/tiny_model.py builds offline (with the pinned vLLM's venv).
#
# The lock files (engines/locks/<engine>-<version>.lock) are full `pip freeze` lists installed with
# --no-deps, so nothing is resolved here. torch is pinned exactly (2.13.0) in every vLLM lock: its CPU wheel
# is on this machine kind's disk (pip find-links), and any other torch pulls a multi-GB CUDA build.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ENGINES="${RUSHHOUR_ENGINES:-$HOME/.cache/rushhour/engines}"
PYTHON="${ENGINES_PYTHON:-$(command -v python3.11 || command -v python3)}"

# name engine dist version pinned|extra, one line per release (a one-line error if the file is wrong)
LISTED="$("$PYTHON" "$HERE/releases.py")"

install_one() {  # install_one NAME: a listed release into its venv
  local name="$1" lock dir stamp want start
  lock="$HERE/locks/$name.lock"
  dir="$ENGINES/$name"
  stamp="$dir/.rushhour-installed"
  want="$(sha256sum "$lock" | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$name: already installed in $dir"
    return 0
  fi
  start=$SECONDS
  echo "$name: installing into $dir (first time: a minute or two) ..."
  rm -rf "$dir"  # a partial or stale venv: venvs do not move, so rebuild in place
  mkdir -p "$ENGINES"
  "$PYTHON" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$lock" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  echo "$want" > "$stamp"
  echo "$name: installed in $((SECONDS - start)) s"
}

PINNED_VLLM="$(awk '$2 == "vllm" && $5 == "pinned" {print $1}' <<<"$LISTED")"

tiny_model() {  # the tiny Llama beside the venvs, built with the pinned vLLM venv's torch/transformers
  local dir="$ENGINES/tiny-llama"
  "$ENGINES/$PINNED_VLLM/bin/python" "$HERE/tiny_model.py" "$dir" >/dev/null 2> >(grep -v -E "Writing model shards" >&2)
  echo "tiny model: $dir"
}

names() {  # names ARG: the releases an argument stands for
  case "$1" in
    all) awk '{print $1}' <<<"$LISTED" ;;
    vllm|litellm) awk -v e="$1" '$2 == e && $5 == "pinned" {print $1}' <<<"$LISTED" ;;
    *) awk -v n="$1" '$1 == n {print $1}' <<<"$LISTED" ;;
  esac
}

if [ $# -eq 0 ]; then
  echo "usage: engines/install.sh {all|vllm|litellm|RELEASE...}; releases: $(awk '{printf "%s ", $1}' <<<"$LISTED")" >&2
  exit 2
fi
wanted=()
for arg in "$@"; do
  found="$(names "$arg")"
  if [ -z "$found" ]; then
    echo "engines/install.sh: no release $arg in engines/releases.toml (listed: $(awk '{printf "%s ", $1}' <<<"$LISTED"))" >&2
    exit 2
  fi
  while read -r name; do wanted+=("$name"); done <<<"$found"
done
# every vLLM release serves the tiny model, which the pinned vLLM's venv builds: that venv comes first
case " ${wanted[*]} " in *" vllm-"*) wanted=("$PINNED_VLLM" "${wanted[@]}"); model=1 ;; esac
declare -A done_=()
for name in "${wanted[@]}"; do
  if [ -z "${done_[$name]:-}" ]; then install_one "$name"; done_[$name]=1; fi
done
if [ -n "${model:-}" ]; then tiny_model; fi
