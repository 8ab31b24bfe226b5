#!/usr/bin/env bash
# Master and workers on several machines, without Kubernetes. Run the master on host A:
#   python -m locust -f loadgen/locustfile.py --master --headless --expect-workers 4 -u 4 -r 4 -t 10m \
#       --rh-scenario my-scenario.yaml --rh-run-dir runs/multi-host --rh-workers 4 \
#       --rh-target http://gateway.example:8080
# and on each worker host (same checkout, same scenario file, a shared or later-merged runs/ folder):
#   python -m locust -f loadgen/locustfile.py --worker --master-host host-a
# Afterwards copy every host's runs/multi-host/records/*.jsonl into one folder and `rushhour audit` it.
set -euo pipefail
echo "see the comments in this file"
