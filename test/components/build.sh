#!/usr/bin/env bash
# build.sh builds the real Kubernetes components the end-to-end tests run
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# nfd-master, containerd 2 with ctr and its runc shim, and kubectl for the
# documentation's commands) at pinned
# versions into a cache directory outside the clone, skipping binaries that are
# already there.
#
# Usage:
#   test/components/build.sh            build what is missing, print the bin dir last
#   test/components/build.sh --dir      print the bin dir only, build nothing
#   test/components/build.sh --check    exit 1 (listing them) if binaries are missing
#
# Environment:
#   FEATUREPLUG_CACHE       cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/featureplug)
#   FEATUREPLUG_COMPONENTS  space-separated subset to build
#                           (default "etcd kube-apiserver nfd-master kubelet
#                           kube-controller-manager kube-scheduler containerd
#                           kubectl")
#
# Each component is built with `go build` from a scratch Go module kept under
# the cache directory (never in the clone), so the module proxy and the Go
# build cache do the heavy lifting and a second run takes seconds. nfd-master
# is built against the same Kubernetes libraries as kube-apiserver (instead of
# the older ones NFD's go.mod pins), so it reuses most of its compiled packages.
set -euo pipefail

ETCD_VERSION=v3.6.16
KUBE_VERSION=v1.37.2
KUBE_STAGING_VERSION=v0.37.2
NFD_VERSION=v0.19.0
# containerd 2 injects CDI devices through its CRI plugin (1.6 cannot). Its
# version is not part of the set's directory name: it is stamped next to
# its binaries (containerd.version), so a new pin rebuilds containerd alone.
CONTAINERD_VERSION=v2.4.2

CACHE_ROOT=${FEATUREPLUG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/featureplug}
SET_VERSION="k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_nfd-${NFD_VERSION}"
BIN_DIR="${CACHE_ROOT}/bin/${SET_VERSION}"
SRC_DIR="${CACHE_ROOT}/src/${SET_VERSION}"
ALL_COMPONENTS="etcd kube-apiserver nfd-master kubelet kube-controller-manager kube-scheduler containerd kubectl"
# The binaries the containerd component installs (ctr imports the tests'
# images; the shim runs runc).
CONTAINERD_BINARIES="containerd ctr containerd-shim-runc-v2"
COMPONENTS=${FEATUREPLUG_COMPONENTS:-$ALL_COMPONENTS}

# Staging modules replaced in k8s.io/kubernetes's own go.mod. sample-cli-plugin
# and sample-controller are left out: the module proxy does not serve them and
# nothing we build imports them.
KUBE_STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
cloud-provider cluster-bootstrap code-generator component-base component-helpers
controller-manager cri-api cri-client cri-streaming csi-translation-lib
dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
mount-utils pod-security-admission sample-apiserver streaming"

log() { printf '[components] %s\n' "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# stamp C prints the version stamped next to component C's binaries, for
# components whose version is not in the set's name; empty otherwise.
stamp() {
	case $1 in
	containerd) echo "$CONTAINERD_VERSION" ;;
	esac
}

# binaries C lists the binaries component C installs.
binaries() {
	case $1 in
	containerd) echo "$CONTAINERD_BINARIES" ;;
	*) echo "$1" ;;
	esac
}

# is_built C reports whether every binary of component C is in BIN_DIR
# (at the stamped version, where it has one).
is_built() {
	local c=$1 b want
	for b in $(binaries "$c"); do
		[[ -x "$BIN_DIR/$b" ]] || return 1
	done
	want=$(stamp "$c")
	[[ -z "$want" ]] || [[ "$(cat "$BIN_DIR/$c.version" 2>/dev/null)" == "$want" ]]
}

case "${1:-}" in
--dir)
	echo "$BIN_DIR"
	exit 0
	;;
--check)
	missing=""
	for c in $COMPONENTS; do
		is_built "$c" || missing="$missing $c"
	done
	if [[ -n "$missing" ]]; then
		echo "missing in $BIN_DIR:$missing" >&2
		exit 1
	fi
	echo "$BIN_DIR"
	exit 0
	;;
"") ;;
*) die "unknown argument '$1' (want --dir, --check or nothing)" ;;
esac

command -v go >/dev/null || die "go is not on PATH; install Go 1.26 first"
for c in $COMPONENTS; do
	case " $ALL_COMPONENTS " in
	*" $c "*) ;;
	*) die "FEATUREPLUG_COMPONENTS names unknown component '$c' (known: $ALL_COMPONENTS)" ;;
	esac
done

mkdir -p "$BIN_DIR" "$SRC_DIR"
# One builder at a time: parallel test processes may all find a binary missing.
if command -v flock >/dev/null; then
	exec 9>"$CACHE_ROOT/bin/.build.lock"
	if ! flock -n 9; then
		log "another build holds $CACHE_ROOT/bin/.build.lock; waiting for it"
		flock 9
	fi
fi

# Keep the Go environment of the caller (its GOCACHE, GOMODCACHE, CGO_CFLAGS)
# so the build cache is shared with the test builds; only force module mode.
export GOFLAGS="-mod=mod"
export GOWORK=off
export GO111MODULE=on

# write_module DIR GO_MOD_CONTENT writes a scratch module's go.mod.
write_module() {
	local dir=$1 content=$2
	mkdir -p "$dir"
	# Rewrite go.mod only when its wanted content changed, so go.sum stays valid.
	if [[ ! -f "$dir/go.mod.want" ]] || [[ "$(cat "$dir/go.mod.want")" != "$content" ]]; then
		printf '%s\n' "$content" >"$dir/go.mod.want"
		printf '%s\n' "$content" >"$dir/go.mod"
		rm -f "$dir/go.sum"
	fi
}

staging_replaces() {
	local version=$1 mods=$2 m
	echo "replace ("
	for m in $mods; do
		printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$version"
	done
	echo ")"
}

kube_ldflags() {
	local minor=${KUBE_VERSION#v1.}
	minor=${minor%%.*}
	local p=k8s.io/component-base/version
	echo "-s -w -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor" \
		"-X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
}

# build NAME MODULE_DIR PACKAGE [LDFLAGS]
build() {
	local name=$1 dir=$2 pkg=$3 ldflags=${4:-"-s -w"}
	local out="$BIN_DIR/$name" logf="$SRC_DIR/$name.build.log" start end
	start=$(date +%s)
	log "building $name from $pkg (log: $logf)"
	if ! (cd "$dir" && go build -ldflags "$ldflags" -o "$out.tmp" "$pkg") >"$logf" 2>&1; then
		tail -n 30 "$logf" >&2
		rm -f "$out.tmp"
		die "building $name from $pkg failed after $(($(date +%s) - start))s; full log: $logf"
	fi
	mv "$out.tmp" "$out"
	end=$(date +%s)
	log "built $name in $((end - start))s -> $out"
}

build_etcd() {
	local dir="$SRC_DIR/etcd"
	write_module "$dir" "module featureplug.local/components/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
	build etcd "$dir" go.etcd.io/etcd/server/v3
}

kube_module() {
	local dir="$SRC_DIR/kubernetes"
	write_module "$dir" "module featureplug.local/components/kubernetes

go 1.26.0

godebug default=go1.26

require k8s.io/kubernetes $KUBE_VERSION

$(staging_replaces "$KUBE_STAGING_VERSION" "$KUBE_STAGING")"
	echo "$dir"
}

build_kube_apiserver() {
	build kube-apiserver "$(kube_module)" k8s.io/kubernetes/cmd/kube-apiserver "$(kube_ldflags)"
}

# kube-controller-manager runs only the garbage collector in the tests that
# start it (harness.StartControllerManager); it is built in the same module as
# kube-apiserver so they share the compiled Kubernetes packages.
build_kube_controller_manager() {
	build kube-controller-manager "$(kube_module)" k8s.io/kubernetes/cmd/kube-controller-manager "$(kube_ldflags)"
}

# kube-scheduler places the DRA end-to-end tests' pods (harness.StartScheduler);
# same module as kube-apiserver, so it shares the compiled Kubernetes packages.
build_kube_scheduler() {
	build kube-scheduler "$(kube_module)" k8s.io/kubernetes/cmd/kube-scheduler "$(kube_ldflags)"
}

build_kubelet() {
	build kubelet "$(kube_module)" k8s.io/kubernetes/cmd/kubelet "$(kube_ldflags)"
}

# kubectl runs the README's and docs' kubectl commands against the harness's
# kube-apiserver (test/e2e/docs_test.go); same module, same packages.
build_kubectl() {
	build kubectl "$(kube_module)" k8s.io/kubernetes/cmd/kubectl "$(kube_ldflags)"
}

build_nfd_master() {
	local dir="$SRC_DIR/nfd"
	write_module "$dir" "module featureplug.local/components/nfd

go 1.26.0

godebug default=go1.26

require (
	k8s.io/kubernetes $KUBE_VERSION
	sigs.k8s.io/node-feature-discovery $NFD_VERSION
	sigs.k8s.io/node-feature-discovery/api/nfd $NFD_VERSION
)

$(staging_replaces "$KUBE_STAGING_VERSION" "$KUBE_STAGING")"
	build nfd-master "$dir" sigs.k8s.io/node-feature-discovery/cmd/nfd-master \
		"-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version=$NFD_VERSION"
}

# containerd builds in its own scratch module: its dependencies (grpc,
# protobuf, the OCI and CDI libraries) are not pinned by Kubernetes'. It is
# built as containerd's release is, all plugins in; the tests' configuration
# turns off the snapshotters other than overlayfs.
build_containerd() {
	local dir="$SRC_DIR/containerd" b p=github.com/containerd/containerd/v2
	write_module "$dir" "module featureplug.local/components/containerd

go 1.26.0

require $p $CONTAINERD_VERSION"
	for b in $CONTAINERD_BINARIES; do
		build "$b" "$dir" "$p/cmd/$b" "-s -w -X $p/version.Version=$CONTAINERD_VERSION -X $p/version.Revision=featureplug-components"
	done
	echo "$CONTAINERD_VERSION" >"$BIN_DIR/containerd.version"
}

total_start=$(date +%s)
built=0
for c in $COMPONENTS; do
	if is_built "$c"; then
		log "$c: already in $BIN_DIR, skipping"
		continue
	fi
	case $c in
	etcd) build_etcd ;;
	kube-apiserver) build_kube_apiserver ;;
	kubelet) build_kubelet ;;
	kube-controller-manager) build_kube_controller_manager ;;
	kube-scheduler) build_kube_scheduler ;;
	nfd-master) build_nfd_master ;;
	containerd) build_containerd ;;
	kubectl) build_kubectl ;;
	esac
	built=$((built + 1))
done
log "done: built $built component(s) in $(($(date +%s) - total_start))s"
echo "$BIN_DIR"
