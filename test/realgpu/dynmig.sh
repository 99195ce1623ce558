#!/usr/bin/env bash
# Dynamic MIG's prepare path on a real MIG-capable GPU (H100, H200, B200; an
# A100 with MIG mode already on).
#
# From the repository root, on a machine with an NVIDIA GPU, its driver and Go:
#
#   bash test/realgpu/dynmig.sh [OUT_DIR]     # default OUT_DIR: discovery/testdata/real
#
# It runs plugin/dra's TestDynamicPrepareOnGPU against the node's NVML: for
# every MIG profile, at its lowest and highest placement, a claim is
# prepared as the kubelet's NodePrepareResources does (MIG device created at
# exactly that placement through discovery/migctl, its CDI spec written by
# NVIDIA's nvcdi, the claim checkpointed), the GPU must hold exactly that MIG
# device, and the unprepare must leave none; each prepare's and unprepare's
# time goes to OUT_DIR/dynmig.log (for docs/performance.md).
#
# It changes GPU state and cleans up after itself: it touches only a GPU
# that holds no MIG device, destroys every MIG device it creates, and turns
# MIG mode on (and off again at the end) only with MIG_ALLOW_MODE=1.
# MIG_GPU=N checks only GPU N; DRIVER_ROOT=DIR is where the driver's files
# are (default /). FAKE_NODE=NAME runs it on a bundled fake node instead (a
# dry run without a GPU).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-$ROOT/discovery/testdata/real}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}
export CGO_ENABLED=1
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}
command -v go >/dev/null 2>&1 || { echo "go not found" >&2; exit 2; }

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [[ -n "${FAKE_NODE:-}" ]]; then
	export FEATUREPLUG_DYNMIG_CHECK="fake:$FAKE_NODE"
else
	export FEATUREPLUG_DYNMIG_CHECK=real
fi
[[ -n "${MIG_GPU:-}" ]] && export FEATUREPLUG_DYNMIG_GPU="$MIG_GPU"
export MIG_ALLOW_MODE=${MIG_ALLOW_MODE:-0}

RC=0
(cd "$ROOT" && timeout --signal=INT --kill-after=60 "$STEP_TIMEOUT" \
	go test -count=1 -v -run '^TestDynamicPrepareOnGPU$' ./plugin/dra/) >"$OUT/dynmig.log" 2>&1 || RC=$?
grep -E 'prepare|SKIP|FAIL|PASS' "$OUT/dynmig.log" >&2 || true
echo "dynamic MIG check: exit $RC; log in $OUT/dynmig.log" >&2
exit "$RC"
