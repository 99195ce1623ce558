// Package agentconfig is what the agent is given: its configuration, as the
// command line fills it, with its defaults and their validation, and the
// interfaces of the two inputs the command wires in (the GPU source and the
// rules engine). The agent's loop and construction (package agent) only
// read it.
package agentconfig

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// Defaults of the agent's intervals.
const (
	DefaultRediscoverInterval = 30 * time.Second
	DefaultResyncInterval     = time.Hour
	// DefaultFileCheckInterval is the period of the file watcher's check
	// behind inotify, for every watch (rules file, feature file, CDI spec,
	// kubelet directories): a few stat calls and a content hash, no API
	// calls.
	DefaultFileCheckInterval = fswatch.DefaultInterval
	// DefaultFileSettle is how long a changed file must stay unchanged
	// before it is taken, so that a slow writer's half-written file is
	// never applied.
	DefaultFileSettle = fswatch.DefaultSettle
	// DefaultPublishHold is Config.PublishHold of `featureplug run`: long
	// enough for a kubelet that is up to accept every resource (a few
	// milliseconds), short enough that a node whose kubelet is not up yet
	// gets its labels without a noticeable delay.
	DefaultPublishHold = time.Second
)

// GPUSource is where the agent reads GPUs from: the real NVML library or
// a fake node (package gpusource).
type GPUSource interface {
	// Discover reads the node's GPUs. It also returns the NVML the health
	// watcher should listen to: the same value until the hardware behind it
	// is replaced (a fake node whose file changed).
	Discover() (*discovery.Inventory, nvml.Interface, error)
	// Close releases NVML.
	Close()
}

// Config is everything the agent needs. The command line fills it.
type Config struct {
	// NodeName is the Kubernetes node the agent runs on.
	NodeName string
	// Namespace is the agent's namespace, for the NodeFeature object
	// (Events about the Node go to the default namespace).
	Namespace string
	// Source reads the GPUs (a gpusource.Real or gpusource.Fake).
	Source GPUSource
	// Rules is a builtin rules name or a rules file path; "" means the
	// builtin default. A file is watched and reloaded on change.
	Rules string
	// RulesEngine loads Rules (RulesEngine below); required.
	RulesEngine RulesEngine
	// DefaultServe is the kubelet API of the resources whose rules do not
	// choose one; "" means plan.ServeDevicePlugin.
	DefaultServe plan.Serve
	// NodeLabels are node labels the rules' node selectors see in addition
	// to the Node object's labels (when Kube is set).
	NodeLabels map[string]string
	// Publish says where features and labels go.
	Publish labeler.PublishMode
	// FeaturesFile is the nfd-worker feature file for PublishFile.
	FeaturesFile string
	// Labels tunes label computation.
	Labels labeler.LabelOptions
	// TimestampLabel publishes nvidia.com/gfd.timestamp, renewed at every
	// publish and resync (so every resync writes); see labeler.Loop.
	TimestampLabel bool
	// Owner says what owns the NodeFeature; the zero value is the agent's
	// Pod and DaemonSet, or the Node outside a Pod.
	Owner kube.OwnerConfig
	// ResyncInterval republishes unchanged content this often (writes only
	// happen when something differs).
	ResyncInterval time.Duration
	// RediscoverInterval re-reads the GPUs this often.
	RediscoverInterval time.Duration
	// Rediscover triggers an immediate re-discovery (SIGHUP).
	Rediscover <-chan struct{}
	// Kube is the API client (package kube; kubeclientset adapts
	// client-go's clientsets); nil runs without an API server (no
	// NodeFeature, no Events, node labels from NodeLabels only).
	Kube kube.Interface
	// Plugin configures the device-plugin servers. Its Logger, Registerer,
	// Gate, Health and Watcher are set by the agent.
	Plugin deviceplugin.Options
	// MPS configures the MPS control daemons of MPS-shared resources. Its
	// Logger, Registerer, ComputeMode and OnChange are set by the agent.
	MPS mps.Options
	// CDI says where the CDI spec written with a CDI device-list strategy
	// (and for the devices served through DRA) goes and where the driver
	// its edits come from is; its vendor/class is Plugin.CDIKind and its
	// device names follow Plugin.DeviceIDStrategy.
	CDI cdi.DriverConfig
	// DRACrashAt, a test hook, kills the agent when a dynamic MIG
	// prepare reaches the step it names (dra.PrepareSteps); "" never.
	DRACrashAt string
	// DRARegistryDir and DRAPluginDir are where the kubelet-facing DRA
	// driver makes its registration socket and its DRA service socket
	// (the command line's defaults are dra.DefaultRegistryDir and
	// dra.DefaultPluginDir); either empty runs no kubelet-facing DRA
	// driver, so claims of DRA devices cannot be prepared on this node.
	DRARegistryDir, DRAPluginDir string
	// DRAInstance names the DRA driver's sockets for rolling updates (the
	// pod's UID; see dra.NodeOptions.Instance); "" keeps the fixed names.
	DRAInstance string
	// Health configures the NVML health watcher; it sends every event
	// (AllEvents), which the health tracker decides on, and its
	// IgnoredXIDs are the policy's XIDs of effect none, under the rules
	// file's health section.
	Health discovery.HealthOptions
	// VFIOProbeInterval is how often the health of the GPUs passed through
	// to VMs is read from sysfs; zero means health.DefaultVFIOProbeInterval.
	VFIOProbeInterval time.Duration
	// HealthRecovery is the quiet period of until-quiet holds unless the
	// rules file's health section says otherwise; 0 disables recovery.
	HealthRecovery time.Duration
	// BootIDFile is where the node's boot ID is read, which ends
	// until-reboot holds when it changes (default discovery.BootIDPath).
	BootIDFile string
	// StateDir holds what must survive a restart (unhealthy devices,
	// prepared DRA claims); "" keeps nothing.
	StateDir string
	// FileCheckInterval is the period of the file watcher's check behind
	// inotify, for every watch; zero means DefaultFileCheckInterval.
	FileCheckInterval time.Duration
	// FileSettle is how long a changed rules file must stay unchanged
	// before it is applied; zero means DefaultFileSettle.
	FileSettle time.Duration
	// NoInotify makes the file watcher run without inotify, as on a node
	// whose fs.inotify.max_user_instances is exhausted (tests, and agents
	// run by the hundred in one process).
	NoInotify bool
	// LivenessTimeout is how long the agent loop may make no progress
	// before /healthz fails; zero means DefaultLivenessTimeout.
	LivenessTimeout time.Duration
	// MetricsAddr serves /metrics, /healthz and /readyz; "" disables it.
	MetricsAddr string
	// PublishHold is how long the first publish of features and labels
	// waits, at most, for the kubelet to accept every device-plugin
	// resource: register first, so that building and writing the
	// NodeFeature or feature file does not take the CPU from the
	// registrations. Zero publishes at once.
	PublishHold time.Duration
	// AfterStartup, when set, runs once every resource is registered (or
	// start-up has lasted 30 s), not when the agent stops before: the
	// command line sets the collector's serving target there (gctune.Tune).
	AfterStartup func()
	// NoDevicePlugins runs with the publishing sink only: plans are
	// published, not served (the scale driver's simulated nodes).
	NoDevicePlugins bool
	// Stdout receives PublishStdout output.
	Stdout io.Writer
	// Logger receives the agent's logs.
	Logger *slog.Logger
}

// Complete validates the configuration and fills its defaults.
func (cfg *Config) Complete() error {
	if cfg.Source == nil {
		return errors.New("agent: no GPU source")
	}
	if cfg.NodeName == "" {
		return errors.New("--node-name: empty (set it or NODE_NAME)")
	}
	if !cfg.RulesEngine.Complete() {
		return errors.New("agent: no rules engine")
	}
	switch cfg.DefaultServe {
	case "":
		cfg.DefaultServe = plan.ServeDevicePlugin
	case plan.ServeDevicePlugin, plan.ServeDRA:
	default:
		return fmt.Errorf("--serve: %q is not a kubelet API (use %s or %s)", cfg.DefaultServe, plan.ServeDevicePlugin, plan.ServeDRA)
	}
	if cfg.DefaultServe == plan.ServeDRA && !cfg.NoDevicePlugins {
		if cfg.Kube == nil {
			return errors.New("--serve dra publishes ResourceSlices: it needs an API server (in-cluster or --kubeconfig)")
		}
		if cfg.CDI.SpecDir == "" {
			return errors.New("--serve dra prepares devices as CDI devices: --cdi-spec-dir is empty")
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RediscoverInterval <= 0 {
		cfg.RediscoverInterval = DefaultRediscoverInterval
	}
	if cfg.Publish == "" {
		cfg.Publish = labeler.PublishNone
	}
	if cfg.HealthRecovery < 0 {
		return fmt.Errorf("--health-recovery: %v is negative (0 disables recovery)", cfg.HealthRecovery)
	}
	if cfg.VFIOProbeInterval < 0 {
		return fmt.Errorf("--vfio-health-interval: %v is negative", cfg.VFIOProbeInterval)
	}
	return nil
}

// RuleSet is a loaded rules file as the agent uses it: where it came from,
// what identifies its content (plan.Plan.RulesDigest: plan.RulesDigest of
// a file's content, a builtin's source), what was odd about it, and the
// plan it makes of an inventory and the node's labels.
type RuleSet interface {
	Source() string
	Digest() string
	Warnings() []string
	Plan(inv *discovery.Inventory, nodeLabels map[string]string) (*plan.Plan, error)
}

// RulesEngine loads rules for the agent. The command wires the rules
// package into it, so the agent, like every sink, depends only on the plan
// contract and never on the rules engine itself (docs/architecture.md).
type RulesEngine struct {
	// Default returns the builtin rules used when Config.Rules is empty.
	Default func() RuleSet
	// Load reads a builtin by name (the agent reads a rules file itself,
	// through its file watcher, and parses it).
	Load func(name string) (RuleSet, error)
	// Parse reads the content of a rules file read from source.
	Parse func(source string, data []byte) (RuleSet, error)
	// Builtins are the names Load takes; any other Config.Rules is a path.
	Builtins []string
	// MaxFileSize bounds a rules file; a larger one is refused.
	MaxFileSize int64
}

// Complete reports whether every function of the engine is set.
func (e RulesEngine) Complete() bool {
	return e.Default != nil && e.Load != nil && e.Parse != nil && e.MaxFileSize > 0
}
