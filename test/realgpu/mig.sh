#!/usr/bin/env bash
# Dynamic MIG's NVML path on a real MIG-capable GPU (A100, H100, H200, B200).
#
# From the repository root, on a machine with an NVIDIA GPU and driver:
#
#   bash test/realgpu/mig.sh [OUT_DIR]        # default OUT_DIR: discovery/testdata/real
#
# It builds test/realgpu/migcheck (or uses MIGCHECK_BIN) and runs it: for
# every MIG profile and placement the GPU lists, it creates the MIG device
# through discovery/migctl (as dynamic MIG's Prepare does), checks that
# NVML and featureplug's discovery see it there, and destroys it; it
# probes NVML's answers for an occupied placement, a placement the profile
# lacks, a second +me instance and a GPU instance destroyed before its
# compute instance. It writes OUT_DIR/mig.json and mig.log;
# test/realgpu's TestMIGCheckReport compares them with the fake node:
# cd test && go test ./realgpu/ -run TestMIGCheckReport
#
# Unlike run.sh it changes GPU state, and cleans up after itself: it only
# touches GPUs that hold no MIG device (it never destroys one it did not
# create), destroys every MIG device it created (also on SIGINT/SIGTERM or
# failure), and leaves a GPU with MIG mode disabled alone unless
# MIG_ALLOW_MODE=1, which lets it enable MIG mode and disable it again at
# the end. MIG_GPU=N checks only GPU N. FAKE_NODE=NAME runs it on a
# bundled fake node instead (a dry run without a GPU).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-$ROOT/discovery/testdata/real}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-900}
STEP_TIMEOUT=${STEP_TIMEOUT:-600}
export CGO_ENABLED=1
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fp-mig.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

BIN=${MIGCHECK_BIN:-}
if [[ -z "$BIN" ]]; then
	command -v go >/dev/null 2>&1 || { echo "go not found: set MIGCHECK_BIN to a prebuilt migcheck" >&2; exit 2; }
	BIN=$WORK/migcheck
	(cd "$ROOT/test" && timeout "$BUILD_TIMEOUT" go build -o "$BIN" ./realgpu/migcheck)
fi

ARGS=(-out "$OUT/mig.json")
[[ -n "${MIG_GPU:-}" ]] && ARGS+=(-gpu "$MIG_GPU")
[[ "${MIG_ALLOW_MODE:-0}" == 1 ]] && ARGS+=(-allow-mig-mode)
[[ -n "${FAKE_NODE:-}" ]] && ARGS+=(-fake-node "$FAKE_NODE")
if command -v nvidia-smi >/dev/null 2>&1 && [[ -z "${FAKE_NODE:-}" ]]; then
	# The driver's own view of the placements, for comparison.
	nvidia-smi mig -lgipp >"$OUT/lgipp.txt" 2>&1 || true
fi

# SIGINT, not SIGKILL, on timeout: migcheck cleans up on SIGINT.
RC=0
timeout --signal=INT --kill-after=60 "$STEP_TIMEOUT" "$BIN" "${ARGS[@]}" >"$OUT/mig.log" 2>&1 || RC=$?
echo "migcheck: exit $RC; report in $OUT/mig.json, log in $OUT/mig.log" >&2
exit "$RC"
