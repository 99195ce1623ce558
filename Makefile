# featureplug build, test and demo entry points.
#
#   make demo    the whole chain on a bundled fake node (no GPU, no cluster)
#   make demo-kubelet  pods on a real kubelet and containerd 2 get the fake node's GPUs (root)
#   make test    unit tests (-race) and end-to-end tests against real components
#   make bench   Go benchmarks and whole-process figures
#   make lint    gofmt, go vet and golangci-lint

GO       ?= go
BIN_DIR  ?= bin
BIN      := $(BIN_DIR)/featureplug
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The commit and build date `featureplug version` prints when the Go build
# info has no VCS stamp (a git worktree, the image's source without .git).
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS    := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)

# go-nvml needs cgo. Keep one CGO_CFLAGS value everywhere: a different value
# rebuilds go-nvml from scratch.
export CGO_ENABLED := 1
export CGO_CFLAGS  := -O2 -g -Wno-deprecated-declarations

GOLANGCI_LINT_VERSION ?= v2.15.0

.PHONY: all build test unit e2e faults components lint demo demo-kubelet bench bench-go bench-process bench-profile fuzz clean image image-push scale

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/featureplug

## test: everything CI runs.
test: unit e2e

## unit: the product module's tests, with the race detector.
unit:
	$(GO) test -race -count=1 ./...

## components: build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, nfd-master, kubelet, containerd and kubectl into the cache.
components:
	bash test/components/build.sh

## e2e: end-to-end tests against real components (builds them when missing).
## It includes the fault suite.
e2e: components
	cd test && $(GO) test -race -count=1 -timeout 30m ./...

## faults: only the fault suite (test/e2e/faults_*_test.go): one test per
## operator-caused fault in docs/reliability.md, each asserting what
## featureplug does about it.
faults: components
	cd test && $(GO) test -race -count=1 -timeout 30m -run '^TestFault' ./e2e/

## scale: N simulated GPU nodes (real agents, several per process) against one
## kube-apiserver, etcd and nfd-master: requests per node-hour, NodeFeature
## sizes, label and plan latencies, an API-server restart (docs/scale.md).
## The test suite runs the same test as a smoke test at 50 nodes. -race as in
## e2e, so the test module's packages come from the same build cache (the
## agents run in a plain build of cmd/featureplug-scale).
SCALE_NODES ?= 1000
SCALE_OUT   ?= $(CURDIR)/$(BIN_DIR)/scale.md
scale: components
	mkdir -p $(BIN_DIR)
	cd test && SCALE_NODES=$(SCALE_NODES) SCALE_FULL=1 SCALE_OUT=$(SCALE_OUT) \
		$(GO) test -race -count=1 -timeout 60m -run '^TestScale$$' -v ./scale/

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...
	cd test && $(GO) vet ./...
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

## demo: the whole chain on the bundled fake dgx-a100, no GPU and no cluster.
demo: build
	$(GO) build -o $(BIN_DIR)/featureplug-demo ./cmd/featureplug-demo
	$(BIN_DIR)/featureplug-demo --featureplug $(BIN)

## demo-kubelet: the pods-run end-to-end test, told as it goes: a real
## kubelet and containerd 2 with runc (root only; Debian: apt-get install
## runc), featureplug on a fake node next to them, and pods whose containers
## print what they got: device nodes, driver files, environment, through the
## device plugins (cdi-cri, cdi-annotations, envvar, MIG, MPS), DRA and
## dynamic MIG (a MIG device created for the pod, destroyed after), then
## an XID on a running pod's GPU and a kill -9 of the agent with a kubelet
## restart. About a minute once `make test` has built everything.
## PODS_ROUNDS=5 runs five pods per path for the medians of
## docs/performance.md.
PODS_ROUNDS ?= 1

demo-kubelet: components
	@if [ "$$(id -u)" != 0 ]; then echo "demo-kubelet runs containerd and the kubelet, which need root (a private mount namespace, cgroups, device nodes): run it as root"; exit 1; fi
	cd test && FEATUREPLUG_PODS_ROUNDS=$(PODS_ROUNDS) bash -o pipefail -c \
		'$(GO) test -race -count=1 -timeout 20m -run "^TestPodsRun$$" -v ./e2e/ | sed -E "s/^ +[a-z_]+\.go:[0-9]+: /  /"'

## bench: the Go benchmarks of every package, then featureplug-bench against
## `featureplug run` on the bundled 8x H100 and 8x A100 (MIG) fake nodes with
## the mixed rules, printing the medians next to the goals (docs/performance.md).
## BENCH_TIME bounds each Go benchmark, so the whole target takes a few
## minutes on 2 cores; the JSON documents land in $(BENCH_OUT).
BENCH_TIME   ?= 200ms
BENCH_ROUNDS ?= 5
BENCH_ALLOCS ?= 1000
BENCH_NODES  ?= dgx-h100 dgx-a100
BENCH_OUT    ?= $(BIN_DIR)/bench

bench: bench-go bench-process

## bench-go: every package's testing.B benchmarks.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCH_TIME) ./...

## bench-process: the whole agent as the kubelet sees it, built as the
## Dockerfile builds it (stripped), beside the bench's null plugin (the
## floor: one resource, fixed devices) measured in the same rounds, each
## in a memory cgroup of its own for its working set (as root; RSS only
## where there is no memory controller to use).
bench-process:
	mkdir -p $(BENCH_OUT)
	$(GO) build -trimpath -tags noclaimexplain -ldflags "-s -w $(LDFLAGS)" -o $(BENCH_OUT)/featureplug ./cmd/featureplug
	$(GO) build -o $(BIN_DIR)/featureplug-bench ./cmd/featureplug-bench
	$(GO) build -trimpath -ldflags "-s -w" -o $(BENCH_OUT)/nullplugin ./cmd/featureplug-bench/nullplugin
	for node in $(BENCH_NODES); do \
		$(BIN_DIR)/featureplug-bench -q --featureplug $(BENCH_OUT)/featureplug --null-plugin $(BENCH_OUT)/nullplugin \
			--fake-node $$node --rules mixed \
			--rounds $(BENCH_ROUNDS) --allocs $(BENCH_ALLOCS) --json $(BENCH_OUT)/$$node.json || exit 1; \
		echo; \
	done

## bench-profile: where start-up time goes: a CPU profile of the agent's
## in-process start-up (go test -cpuprofile), the costliest package
## initializers of the binary, and, when perf is installed, a whole-process
## profile of ten launches of featureplug run on the fake DGX A100.
bench-profile: build
	mkdir -p $(BENCH_OUT)
	$(GO) test -run '^$$' -bench AgentStartup -benchtime 50x -cpuprofile $(BENCH_OUT)/startup.cpu.prof \
		-o $(BENCH_OUT)/featureplug-bench.test ./cmd/featureplug-bench
	$(GO) tool pprof -top -cum -nodecount 40 -focus 'featureplug/(cmd/internal/agent|discovery|rules|labeler|plugin)\.' \
		$(BENCH_OUT)/featureplug-bench.test $(BENCH_OUT)/startup.cpu.prof
	GODEBUG=inittrace=1 $(BIN) version 2>&1 >/dev/null | sort -t, -k2 -rn | head -15
	@if command -v perf >/dev/null; then \
		dir=$$(mktemp -d /tmp/fpp.XXXX); \
		perf record -q -F 20000 -g -o $(BENCH_OUT)/startup.perf.data -- sh -c \
			'for i in 1 2 3 4 5 6 7 8 9 10; do timeout -s TERM 0.4 $(BIN) run --fake-node dgx-a100 --rules mixed \
				--publish none --kubelet-dir '$$dir' --state-dir '$$dir'/state --metrics-addr 127.0.0.1:0 >/dev/null 2>&1; done'; \
		perf report -i $(BENCH_OUT)/startup.perf.data --comm featureplug --children --sort symbol -g none \
			--percent-limit 4 --stdio 2>/dev/null | awk '/%/ && !/^#/ {print $$1, $$4}'; \
		rm -rf $$dir; \
	else echo "perf not found: skipping the whole-process profile"; fi

## image: the container image (Dockerfile) with docker or podman, tagged
## $(IMAGE): by default as the manifests reference it,
## ghcr.io/featureplug/featureplug:<the chart's appVersion>, which is not
## published; give your registry's name, IMAGE=registry.example.com/featureplug:dev,
## and push it with `make image-push` (docs/deployment.md). Skipped, with a
## message, when neither tool is installed.
IMAGE_REPO ?= ghcr.io/featureplug/featureplug
IMAGE_TAG  ?= $(shell sed -n 's/^appVersion: *//p' manifests/helm/featureplug/Chart.yaml)
IMAGE      ?= $(IMAGE_REPO):$(IMAGE_TAG)
CONTAINER_TOOL ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)

image:
	@if [ -z "$(CONTAINER_TOOL)" ]; then echo "image: neither docker nor podman found; skipping $(IMAGE)"; exit 0; fi; \
	if ! $(CONTAINER_TOOL) info >/dev/null 2>&1; then echo "image: $(CONTAINER_TOOL) cannot reach its engine (daemon not running?); skipping $(IMAGE)"; exit 0; fi; \
	echo "$(CONTAINER_TOOL) build -t $(IMAGE)"; \
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg BUILD_DATE=$(BUILD_DATE) -t $(IMAGE) .

## image-push: push $(IMAGE), built by `make image`, to its registry (log in
## first: docker login / podman login).
image-push:
	@if [ -z "$(CONTAINER_TOOL)" ]; then echo "image-push: neither docker nor podman found"; exit 1; fi
	$(CONTAINER_TOOL) push $(IMAGE)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./rules/

clean:
	rm -rf $(BIN_DIR)
