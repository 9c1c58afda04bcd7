#!/usr/bin/env bash
# The live flow from a fresh shell (docs/executor.md): a local Ray cluster with its scheduler
# service, one job submitted and followed to its end, then the cluster down again (only the
# processes `cluster up` started are stopped).
#   examples/live_cluster.sh [STATE_DIR]        # default state: $PERFCAST_HOME/live
#   JOB=my_job.yaml POLICY=gandiva examples/live_cluster.sh
#   ADD_NODE=2 examples/live_cluster.sh         # and a second raylet with 2 GPUs
#   KEEP_UP=1 examples/live_cluster.sh          # leave it running: `perfcast cluster down` later
set -euo pipefail
state=()
if [ -n "${1:-}" ]; then state=(--state "$1"); fi
job=${JOB:-examples/live_job.yaml}

perfcast cluster up --num-gpus "${NUM_GPUS:-2}" --policy "${POLICY:-fifo}" "${state[@]}"
if [ -z "${KEEP_UP:-}" ]; then
  trap 'perfcast cluster down "${state[@]}"' EXIT   # also when interrupted
fi
if [ -n "${ADD_NODE:-}" ]; then perfcast cluster add-node --num-gpus "$ADD_NODE" "${state[@]}"; fi
perfcast submit "$job" --id demo "${state[@]}"
until perfcast jobs "${state[@]}" | grep -E "demo .*(done|failed)"; do sleep 2; done
perfcast job show demo "${state[@]}"
