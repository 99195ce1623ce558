#!/usr/bin/env bash
# Reference outputs from a real NVIDIA GPU (issue 14.6).
#
# On a machine with an NVIDIA GPU and driver (an H200 is the one expected),
# from the repository root:
#
#   bash test/realgpu/run.sh [OUT_DIR]        # default OUT_DIR: discovery/testdata/real
#
# It builds featureplug and the kubelet-side peer (or uses prebuilt ones:
# FEATUREPLUG_BIN, KUBELETPEER_BIN, e.g. on a machine without Go or without
# network for the module cache), then writes into OUT_DIR:
#
#   nvidia-smi.txt, nvidia-smi-q.txt, topo.txt, lgip.txt  what the driver's own tool says (when nvidia-smi exists)
#   discover.yaml, discover.json, labels.txt              featureplug discover
#   explain-mixed.txt                                      featureplug rules explain --rules mixed
#   run.log, metrics.txt, kubelet.json                     featureplug run with a kubelet peer for RUN_SECONDS
#   run-cdi.log, cdi/                                      featureplug run with --device-list-strategy cdi-cri for a few
#                                                          seconds: the CDI spec nvcdi generates (no kubelet peer)
#   env.txt                                                 versions and the exit code of every step
#
# test/realgpu's TestRealGPUMatchesCatalog then compares the catalog's entry
# for the GPU (memory, MIG profiles with their memory, SMs and instance
# counts) with these files: cd test && go test ./realgpu/
#
# FAKE_NODE=NAME runs the same steps on a bundled fake node instead of the
# driver: a dry run of the script on a machine without a GPU.
#
# It only reads: it changes no GPU setting (no MIG mode, no clocks, no
# reset). MIG layouts are captured only when the GPU is already in MIG mode.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-$ROOT/discovery/testdata/real}
RUN_SECONDS=${RUN_SECONDS:-10}
STEP_TIMEOUT=${STEP_TIMEOUT:-120}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-900}
export CGO_ENABLED=1
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fp-realgpu.XXXXXX")
PIDS=()
cleanup() {
	local pid
	for pid in "${PIDS[@]:-}"; do
		[[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
	done
	rm -rf "$WORK"
}
trap cleanup EXIT

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
: >"$OUT/env.txt"
note() { printf '%s\n' "$*" >>"$OUT/env.txt"; }

# step NAME OUTFILE CMD...: run CMD with a timeout, stdout to OUTFILE, stderr
# appended to OUTFILE.stderr; record the exit code; never abort the script.
step() {
	local name=$1 out=$2
	shift 2
	log "$name"
	local rc=0
	timeout --kill-after=10 "$STEP_TIMEOUT" "$@" >"$out" 2>"$out.stderr" || rc=$?
	[[ -s "$out.stderr" ]] || rm -f "$out.stderr"
	note "step $name: exit $rc"
	return 0
}

note "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
note "host: $(uname -srm)"
note "repo: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"

# The driver's own view, for comparison.
if command -v nvidia-smi >/dev/null 2>&1; then
	step nvidia-smi "$OUT/nvidia-smi.txt" nvidia-smi
	step nvidia-smi-q "$OUT/nvidia-smi-q.txt" nvidia-smi -q
	step topo "$OUT/topo.txt" nvidia-smi topo -m
	# Lists the GPU instance profiles; answers only for GPUs in MIG mode.
	step lgip "$OUT/lgip.txt" nvidia-smi mig -lgip
	note "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
	note "gpus: $(nvidia-smi --query-gpu=name,memory.total,mig.mode.current --format=csv,noheader 2>/dev/null | paste -sd';' - || true)"
else
	log "nvidia-smi not found; only featureplug's view is recorded"
	note "nvidia-smi: not found"
fi

# Binaries.
FP=${FEATUREPLUG_BIN:-}
PEER=${KUBELETPEER_BIN:-}
if [[ -z "$FP" || -z "$PEER" ]]; then
	command -v go >/dev/null 2>&1 || { log "go not found: set FEATUREPLUG_BIN and KUBELETPEER_BIN to prebuilt binaries"; exit 2; }
	note "go: $(go version)"
fi
if [[ -z "$FP" ]]; then
	log "building featureplug"
	FP=$WORK/featureplug
	(cd "$ROOT" && timeout "$BUILD_TIMEOUT" go build -o "$FP" ./cmd/featureplug)
fi
if [[ -z "$PEER" ]]; then
	log "building the kubelet peer"
	PEER=$WORK/kubeletpeer
	(cd "$ROOT/test" && timeout "$BUILD_TIMEOUT" go build -o "$PEER" ./realgpu/kubeletpeer)
fi
note "featureplug: $("$FP" version 2>&1 | head -1 || true)"

# Discovery and rules.
SRC=()
if [[ -n "${FAKE_NODE:-}" ]]; then
	SRC=(--fake-node "$FAKE_NODE")
	note "fake node: $FAKE_NODE (dry run, no driver)"
fi
step discover-yaml "$OUT/discover.yaml" "$FP" discover "${SRC[@]}" -o yaml
step discover-json "$OUT/discover.json" "$FP" discover "${SRC[@]}" -o json
step labels "$OUT/labels.txt" "$FP" discover "${SRC[@]}" -o labels --rules mixed
step explain-mixed "$OUT/explain-mixed.txt" "$FP" rules explain "${SRC[@]}" --rules mixed

# The agent with a kubelet peer for a few seconds.
KDIR=$WORK/kubelet
STATE=$WORK/state
mkdir -p "$KDIR" "$STATE"
PORT=${METRICS_PORT:-18080}
log "kubelet peer and featureplug run for ${RUN_SECONDS}s"
timeout --kill-after=10 $((RUN_SECONDS + 30)) "$PEER" -dir "$KDIR" -wait "$((RUN_SECONDS - 2))s" -out "$OUT/kubelet.json" \
	2>"$OUT/kubelet.stderr" &
PEER_PID=$!
PIDS+=("$PEER_PID")
# Let the peer create kubelet.sock first (bounded; the agent retries anyway).
for _ in $(seq 1 50); do
	[[ -S "$KDIR/kubelet.sock" ]] && break
	sleep 0.1
done
RUN_RC=0
timeout --signal=INT --kill-after=10 "$RUN_SECONDS" "$FP" run "${SRC[@]}" --publish none --rules mixed \
	--kubelet-dir "$KDIR" --state-dir "$STATE" --metrics-addr "127.0.0.1:$PORT" >"$OUT/run.log" 2>&1 &
RUN_PID=$!
PIDS+=("$RUN_PID")
# Metrics while the agent runs (best effort).
sleep $((RUN_SECONDS > 4 ? RUN_SECONDS - 3 : 1))
if command -v curl >/dev/null 2>&1; then
	curl -fsS --max-time 5 "http://127.0.0.1:$PORT/metrics" >"$OUT/metrics.txt" 2>/dev/null || note "metrics: unavailable"
else
	note "metrics: curl not found"
fi
wait "$RUN_PID" || RUN_RC=$?
# 124: stopped by the timeout's SIGINT as intended (featureplug exits 0 on SIGINT).
note "step run: exit $RUN_RC"
PEER_RC=0
wait "$PEER_PID" || PEER_RC=$?
note "step kubelet-peer: exit $PEER_RC"
PIDS=() # both waited for: nothing left to kill
[[ -s "$OUT/kubelet.stderr" ]] || rm -f "$OUT/kubelet.stderr"

# The CDI spec the agent generates with nvcdi (issue 16), a few seconds,
# with no kubelet: the spec is written before any registration.
mkdir -p "$OUT/cdi" "$WORK/kubelet-cdi"
CDI_RC=0
timeout --signal=INT --kill-after=10 "${CDI_SECONDS:-5}" "$FP" run "${SRC[@]}" --publish none --rules mixed \
	--kubelet-dir "$WORK/kubelet-cdi" --state-dir "$STATE" --metrics-addr 127.0.0.1:0 \
	--device-list-strategy cdi-cri --cdi-spec-dir "$OUT/cdi" >"$OUT/run-cdi.log" 2>&1 || CDI_RC=$?
note "step run-cdi: exit $CDI_RC (124: stopped by the timeout as intended)"

log "outputs in $OUT:"
ls -l "$OUT" >&2
if [[ ! -s "$OUT/discover.yaml" ]]; then
	log "featureplug discover wrote nothing; see $OUT/discover.yaml.stderr"
	exit 1
fi
