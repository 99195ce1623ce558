package deviceplugin

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/rules/plan"
)

// DeviceListStrategy is one way of telling the container runtime which
// devices a container gets. Several may be combined.
type DeviceListStrategy string

// Device-list strategies, named as NVIDIA's device plugin names them.
const (
	// DeviceListEnvVar sets NVIDIA_VISIBLE_DEVICES to the device list.
	DeviceListEnvVar DeviceListStrategy = "envvar"
	// DeviceListVolumeMounts mounts /dev/null at
	// /var/run/nvidia-container-devices/<id> for every device.
	DeviceListVolumeMounts DeviceListStrategy = "volume-mounts"
	// DeviceListCDIAnnotations sets a cdi.k8s.io/ annotation naming the
	// CDI devices.
	DeviceListCDIAnnotations DeviceListStrategy = "cdi-annotations"
	// DeviceListCDICRI returns the CDI devices in the CRI CDIDevices field.
	DeviceListCDICRI DeviceListStrategy = "cdi-cri"
)

// DeviceIDStrategy says how devices are named in the device list.
type DeviceIDStrategy string

// Device-id strategies.
const (
	// DeviceIDUUID names devices by GPU or MIG UUID.
	DeviceIDUUID DeviceIDStrategy = "uuid"
	// DeviceIDIndex names devices by index: "3" for a GPU, "3:1" for MIG
	// device 1 of GPU 3.
	DeviceIDIndex DeviceIDStrategy = "index"
)

// ReplicaPolicy says how GetPreferredAllocation picks replicas of shared
// devices.
type ReplicaPolicy string

// Replica allocation policies.
const (
	// ReplicasDistributed spreads replicas over physical devices, least
	// used first.
	ReplicasDistributed ReplicaPolicy = "distributed"
	// ReplicasPacked fills one physical device before the next, most used
	// first, to keep whole devices free.
	ReplicasPacked ReplicaPolicy = "packed"
)

// Defaults of Options.
const (
	// DefaultKubeletDir is the kubelet's device-plugin directory.
	DefaultKubeletDir = pluginapi.DevicePluginPath
	// DefaultCDIKind is the CDI vendor/class of the devices, as
	// nvidia-ctk cdi generate names them.
	DefaultCDIKind = "nvidia.com/gpu"
	// DefaultCDIAnnotationPrefix is the prefix of CDI annotation keys.
	DefaultCDIAnnotationPrefix = cdiapi.AnnotationPrefix
	// DefaultMPSRoot holds one directory per MPS resource, with the MPS
	// control daemon's pipe directory below it.
	DefaultMPSRoot = plan.DefaultMPSRoot
)

// Options configure a Manager. Start from DefaultOptions; NewManager
// fills empty fields with their defaults.
type Options struct {
	// KubeletDir is the kubelet's device-plugin directory, holding
	// kubelet.sock and the plugin sockets.
	KubeletDir string
	// DeviceListStrategies are combined in Allocate responses
	// (default: envvar).
	DeviceListStrategies []DeviceListStrategy
	// DeviceIDStrategy names devices in NVIDIA_VISIBLE_DEVICES, volume
	// mounts and CDI device names (default: uuid).
	DeviceIDStrategy DeviceIDStrategy
	// CDIKind is the CDI "vendor/class" of CDI device names
	// (default: nvidia.com/gpu, giving nvidia.com/gpu=<uuid>).
	CDIKind string
	// CDIAnnotationPrefix replaces cdi.k8s.io/ in CDI annotation keys.
	CDIAnnotationPrefix string
	// ReplicaPolicy picks replicas in GetPreferredAllocation
	// (default: distributed).
	ReplicaPolicy ReplicaPolicy
	// MPSRoot holds the MPS pipe directories, one per MPS resource, in the
	// layout of plan.MPSLayout (see Options.MPSLayout).
	MPSRoot string
	// Gate, when set, is asked before every Allocate; a resource it holds
	// back (ok false) gets codes.Unavailable with the reason. The agent uses
	// it to hold an MPS resource until its control daemon is up.
	Gate func(resource string) (ok bool, reason string)
	// Health is the device health the servers advertise (default: a
	// tracker of its own, recovering after health.DefaultRecovery, kept
	// in memory only). The agent's one tracker is shared with DRA.
	Health *health.Tracker
	// Watcher watches the device-plugin directory (default: a watcher of
	// the manager's own, run by Run). The agent's one watcher is shared
	// with its other watches; its periodic check catches what events
	// miss, and is all there is without an inotify instance.
	Watcher *fswatch.Watcher
	// Logger receives the manager's logs (default: discarded).
	Logger *slog.Logger
	// Registerer, when set, receives the manager's metrics.
	Registerer prometheus.Registerer
	// Clock is the time source of the default health tracker (default:
	// the real clock).
	Clock clock.WithDelayedExecution
}

// DefaultOptions returns the options featureplug runs with by default.
func DefaultOptions() Options {
	return Options{
		KubeletDir:           DefaultKubeletDir,
		DeviceListStrategies: []DeviceListStrategy{DeviceListEnvVar},
		DeviceIDStrategy:     DeviceIDUUID,
		CDIKind:              DefaultCDIKind,
		CDIAnnotationPrefix:  DefaultCDIAnnotationPrefix,
		ReplicaPolicy:        ReplicasDistributed,
		MPSRoot:              DefaultMPSRoot,
	}
}

// withDefaults fills empty fields and validates the result.
func (o Options) withDefaults() (Options, error) {
	if o.KubeletDir == "" {
		o.KubeletDir = DefaultKubeletDir
	}
	o.KubeletDir = filepath.Clean(o.KubeletDir)
	if len(o.DeviceListStrategies) == 0 {
		o.DeviceListStrategies = []DeviceListStrategy{DeviceListEnvVar}
	}
	if o.DeviceIDStrategy == "" {
		o.DeviceIDStrategy = DeviceIDUUID
	}
	if o.CDIKind == "" {
		o.CDIKind = DefaultCDIKind
	}
	if o.CDIAnnotationPrefix == "" {
		o.CDIAnnotationPrefix = DefaultCDIAnnotationPrefix
	}
	if o.ReplicaPolicy == "" {
		o.ReplicaPolicy = ReplicasDistributed
	}
	if o.MPSRoot == "" {
		o.MPSRoot = DefaultMPSRoot
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}

	var errs []error
	seen := map[DeviceListStrategy]bool{}
	for i, s := range o.DeviceListStrategies {
		switch s {
		case DeviceListEnvVar, DeviceListVolumeMounts, DeviceListCDIAnnotations, DeviceListCDICRI:
		default:
			errs = append(errs, fmt.Errorf("deviceListStrategies[%d]: unknown strategy %q (want envvar, volume-mounts, cdi-annotations or cdi-cri)", i, s))
		}
		if seen[s] {
			errs = append(errs, fmt.Errorf("deviceListStrategies[%d]: strategy %q given twice", i, s))
		}
		seen[s] = true
	}
	switch o.DeviceIDStrategy {
	case DeviceIDUUID, DeviceIDIndex:
	default:
		errs = append(errs, fmt.Errorf("deviceIDStrategy: unknown strategy %q (want uuid or index)", o.DeviceIDStrategy))
	}
	switch o.ReplicaPolicy {
	case ReplicasDistributed, ReplicasPacked:
	default:
		errs = append(errs, fmt.Errorf("replicaPolicy: unknown policy %q (want distributed or packed)", o.ReplicaPolicy))
	}
	vendor, class, ok := strings.Cut(o.CDIKind, "/")
	if !ok {
		errs = append(errs, fmt.Errorf("cdiKind: %q is not of the form vendor/class", o.CDIKind))
	} else {
		if err := parser.ValidateVendorName(vendor); err != nil {
			errs = append(errs, fmt.Errorf("cdiKind: %q: %w", o.CDIKind, err))
		}
		if err := parser.ValidateClassName(class); err != nil {
			errs = append(errs, fmt.Errorf("cdiKind: %q: %w", o.CDIKind, err))
		}
	}
	if !strings.HasSuffix(o.CDIAnnotationPrefix, "/") {
		errs = append(errs, fmt.Errorf("cdiAnnotationPrefix: %q must end with '/'", o.CDIAnnotationPrefix))
	}
	if !filepath.IsAbs(o.KubeletDir) {
		errs = append(errs, fmt.Errorf("kubeletDir: %q is not an absolute path", o.KubeletDir))
	} else if _, err := SocketPath(o.KubeletDir, "a.b/c"); err != nil {
		errs = append(errs, fmt.Errorf("kubeletDir: %w", err))
	}
	if !filepath.IsAbs(o.MPSRoot) {
		errs = append(errs, fmt.Errorf("mpsRoot: %q is not an absolute path", o.MPSRoot))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("plugin options: %w", errors.Join(errs...))
	}
	return o, nil
}

// has reports whether strategy s is selected.
func (o *Options) has(s DeviceListStrategy) bool {
	for _, x := range o.DeviceListStrategies {
		if x == s {
			return true
		}
	}
	return false
}

// MPSLayout returns the MPS daemons' directory layout below MPSRoot, which
// Allocate gives to a sharing strategy's container edits.
func (o *Options) MPSLayout() plan.MPSLayout { return plan.MPSLayout{Root: o.MPSRoot} }
