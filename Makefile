# featureplug build, test and demo entry points.
#
#   make demo    the whole chain on a bundled fake node (no GPU, no cluster)
#   make test    unit tests (-race) and end-to-end tests against real components
#   make bench   Go benchmarks and whole-process figures
#   make lint    gofmt, go vet and golangci-lint

GO       ?= go
BIN_DIR  ?= bin
BIN      := $(BIN_DIR)/featureplug
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# go-nvml needs cgo. Keep one CGO_CFLAGS value everywhere: a different value
# rebuilds go-nvml from scratch.
export CGO_ENABLED := 1
export CGO_CFLAGS  := -O2 -g -Wno-deprecated-declarations

GOLANGCI_LINT_VERSION ?= v2.15.0

.PHONY: all build test unit e2e components lint demo bench fuzz clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/featureplug

## test: everything CI runs.
test: unit e2e

## unit: the product module's tests, with the race detector.
unit:
	$(GO) test -race -count=1 ./...

## components: build kube-apiserver, etcd, nfd-master (and kubelet) into the cache.
components:
	bash test/components/build.sh

## e2e: end-to-end tests against real components (builds them when missing).
e2e: components
	cd test && $(GO) test -race -count=1 -timeout 30m ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...
	cd test && $(GO) vet ./...
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

## demo: the whole chain on the bundled fake dgx-a100, no GPU and no cluster.
demo: build
	$(GO) build -o $(BIN_DIR)/featureplug-demo ./cmd/featureplug-demo
	$(BIN_DIR)/featureplug-demo --featureplug $(BIN)

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./rules/

clean:
	rm -rf $(BIN_DIR)
