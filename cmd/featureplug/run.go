package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/featureplug/featureplug/cmd/internal/agent"
	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/gctune"
	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/cmd/internal/rulesengine"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/dra"
	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/plan"
)

// envPrefix prefixes the environment variable of every run flag.
const envPrefix = "FEATUREPLUG_"

// defaultStateDir is --state-dir's default, a hostPath the manifests mount.
const defaultStateDir = "/var/lib/featureplug"

// noInotifyEnv, set to 1, makes the agent's file watcher run without an
// inotify instance, as on a node whose fs.inotify.max_user_instances is
// exhausted. It is a test hook: the fault tests use it to check that the
// agent carries on with its periodic file checks.
const noInotifyEnv = "FEATUREPLUG_TEST_NO_INOTIFY"

// dynMIGCrashEnv names a dynamic MIG prepare step (dra.PrepareSteps) at
// which the agent kills itself with SIGKILL. It is a test hook: the crash
// tests use it to stop a prepare at each step.
const dynMIGCrashEnv = "FEATUREPLUG_TEST_DYNMIG_CRASH_AT"

// runFlags are the flags of `featureplug run`.
type runFlags struct {
	src                sourceFlags
	nodeName           string
	namespace          string
	kubeconfig         string
	rules              string
	waitForRules       bool
	nodeLabels         map[string]string
	publish            string
	featuresFile       string
	resyncInterval     time.Duration
	rediscoverInterval time.Duration
	kubeletDir         string
	deviceList         []string
	deviceID           string
	cdiKind            string
	cdiPrefix          string
	cdiSpecDir         string
	cdiHookPath        string
	cdiHostDriverRoot  string
	replicaPolicy      string
	healthRecovery     time.Duration
	healthEvidence     time.Duration
	vfioHealthInterval time.Duration
	ignoredXIDs        []uint
	mpsRoot            string
	mpsControl         string
	mpsCheckInterval   time.Duration
	metricsAddr        string
	stateDir           string
	fileCheckInterval  time.Duration
	fileSettle         time.Duration
	livenessTimeout    time.Duration
	logFormat          string
	logLevel           string
	owner              string // owner.go
	timestampLabel     bool
	serve              string // the kubelet API of resources whose rules do not say
	draRegistryDir     string // the kubelet's plugin registry directory (DRA registration socket)
	draPluginDir       string // the DRA driver's socket directory
	draRollingUpdate   bool   // DRA sockets named after POD_UID
}

func newRunCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent: discover, publish, plan and serve device plugins",
		Long: `Run discovers the node's GPUs, publishes their features and labels, turns them
into resources with the rules, and serves one kubelet device plugin per
resource. It re-discovers periodically and on SIGHUP, reloads the rules file
when it changes (a bad file keeps the last good plan serving), and stops
cleanly on SIGTERM, leaving the published NodeFeature in place.

Every flag can also be set by an environment variable, named after the flag
in upper case with a FEATUREPLUG_ prefix (shown in brackets); a flag given on
the command line wins.`,
		Example: `  featureplug run --fake-node dgx-a100 --publish stdout --kubelet-dir /tmp/kubelet
  featureplug run --rules /etc/featureplug/rules.yaml --driver-root /run/nvidia/driver`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return asUsageError(err)
			}
			if err := checkKubeletDir(f.kubeletDir); err != nil {
				return err
			}
			if f.waitForRules {
				// A misspelt builtin will never appear.
				if err := rules.MisspeltBuiltin(f.rules); err != nil {
					return usageErrorf("--rules: %w", err)
				}
				return nil
			}
			if err := checkRulesPath("--rules", f.rules); err != nil {
				if rules.MisspeltBuiltin(f.rules) == nil {
					return usageErrorf("%s (with --wait-for-rules the agent starts anyway and applies the file once it appears)", errorText(err))
				}
				return err
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd)
		},
	}
	fs := cmd.Flags()
	f.src.addFlags(fs)
	fs.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "node this agent runs on (default $NODE_NAME)")
	fs.StringVar(&f.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the NodeFeature object (default $POD_NAMESPACE); Events about the Node go to the default namespace")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration when available)")
	addRulesFlag(cmd, &f.rules, rulesFlagUsage("none")+"; it must exist at start unless --wait-for-rules")
	fs.BoolVar(&f.waitForRules, "wait-for-rules", false, "start even when the --rules file does not exist yet (an optional ConfigMap): serve nothing until it appears, then apply it")
	fs.StringToStringVar(&f.nodeLabels, "node-labels", nil, "extra node labels (k=v,...) the rules' node selectors see")
	fs.StringVar(&f.publish, "publish", string(labeler.PublishNodeFeature), "where features and labels go: nodefeature, file, stdout or none")
	fs.StringVar(&f.featuresFile, "features-file", labeler.DefaultFeatureFile, "nfd-worker feature file for --publish file")
	fs.DurationVar(&f.resyncInterval, "resync-interval", agentconfig.DefaultResyncInterval, "republish period (writes happen only on change)")
	fs.DurationVar(&f.rediscoverInterval, "rediscover-interval", agentconfig.DefaultRediscoverInterval, "GPU re-discovery period (SIGHUP re-discovers at once)")
	fs.StringVar(&f.kubeletDir, "kubelet-dir", deviceplugin.DefaultKubeletDir, "kubelet device-plugin directory")
	fs.StringSliceVar(&f.deviceList, "device-list-strategy", []string{string(deviceplugin.DeviceListEnvVar)},
		"how Allocate passes devices: envvar, volume-mounts, cdi-annotations, cdi-cri (comma list)")
	fs.StringVar(&f.deviceID, "device-id-strategy", string(deviceplugin.DeviceIDUUID), "how devices are named to the runtime: uuid or index")
	fs.StringVar(&f.cdiKind, "cdi-kind", deviceplugin.DefaultCDIKind, "CDI vendor/class of CDI device names")
	fs.StringVar(&f.cdiPrefix, "cdi-annotation-prefix", deviceplugin.DefaultCDIAnnotationPrefix, "prefix of CDI annotation keys")
	fs.StringVar(&f.cdiSpecDir, "cdi-spec-dir", cdi.DefaultSpecDir, "directory of the CDI spec written for the advertised devices with a cdi-* device-list strategy, and for the devices served through DRA (which needs it)")
	fs.StringVar(&f.cdiHostDriverRoot, "cdi-host-driver-root", "", "where --driver-root is on the host, for the CDI spec's host paths (default: --driver-root; \"/\" when the host's root is mounted at --driver-root)")
	fs.StringVar(&f.cdiHookPath, "cdi-hook-path", "", "host path of nvidia-cdi-hook, run by the CDI spec's hooks (default: /usr/bin/nvidia-cdi-hook)")
	fs.StringVar(&f.replicaPolicy, "replica-policy", string(deviceplugin.ReplicasDistributed), "preferred replicas of shared devices: distributed or packed")
	fs.DurationVar(&f.healthRecovery, "health-recovery", health.DefaultRecovery, "quiet period after which an unhealthy device is healthy again (0 disables recovery)")
	fs.DurationVar(&f.healthEvidence, "health-evidence-interval", discovery.DefaultEvidenceInterval, "how often NVML's failure and reset evidence (pending retired pages and row remappings, recovery actions, NVLink states) is read again; a reset is seen within it")
	fs.DurationVar(&f.vfioHealthInterval, "vfio-health-interval", health.DefaultVFIOProbeInterval, "how often the binding of the GPUs passed through to VMs is read from sysfs: one that leaves vfio-pci is Unhealthy within this period")
	fs.UintSliceVar(&f.ignoredXIDs, "ignored-xids", nil, "XIDs that never mark a device unhealthy, on top of those NVIDIA's XID catalog resolves by restarting the application or with no action (docs/reliability.md)")
	fs.StringVar(&f.mpsRoot, "mps-root", deviceplugin.DefaultMPSRoot, "root of the MPS pipe and log directories")
	fs.StringVar(&f.mpsControl, "mps-control", mps.DefaultControlBinary, "the nvidia-cuda-mps-control binary")
	fs.DurationVar(&f.mpsCheckInterval, "mps-check-interval", mps.DefaultCheckInterval, "period of the MPS control daemons' liveness check")
	fs.StringVar(&f.metricsAddr, "metrics-addr", ":8080", "address of /metrics, /healthz and /readyz (empty disables)")
	fs.StringVar(&f.draRegistryDir, "kubelet-registry-dir", dra.DefaultRegistryDir, "kubelet plugin registry directory, where the DRA driver's registration socket goes ("+dra.DriverName+"-$"+podUIDEnv+"-reg.sock, or "+dra.RegistrationSocketName+" without --dra-rolling-update)")
	fs.StringVar(&f.draPluginDir, "dra-plugin-dir", dra.DefaultPluginDir, "directory of the DRA driver's socket (dra-$"+podUIDEnv+".sock, or "+dra.PluginSocketName+" without --dra-rolling-update), which the kubelet calls to prepare claims")
	fs.BoolVar(&f.draRollingUpdate, "dra-rolling-update", true, "with $"+podUIDEnv+" set, name the DRA sockets after it, so that the agent of a DaemonSet update registers beside the old one and takes over its prepared claims without a gap (kubelet 1.33 or later; false keeps the fixed names)")
	fs.StringVar(&f.stateDir, "state-dir", defaultStateDir, "host directory for state that must survive a restart (unhealthy devices); created 0700 at start; empty disables persistence")
	fs.DurationVar(&f.fileCheckInterval, "file-check-interval", agentconfig.DefaultFileCheckInterval, "period of the file watcher's check (stat, and a content hash for files) of every watched file and directory (rules file, feature file, CDI spec, kubelet directories), which catches what inotify misses")
	fs.DurationVar(&f.fileSettle, "file-settle", agentconfig.DefaultFileSettle, "how long a changed rules file must stay unchanged before it is applied")
	fs.DurationVar(&f.livenessTimeout, "liveness-timeout", agent.DefaultLivenessTimeout, "/healthz fails when the agent loop has made no progress for this long")
	fs.StringVar(&f.owner, "owner", string(kube.OwnerDaemonSet), "what owns the NodeFeature, whose deletion removes it and its labels: daemonset (the agent's Pod and DaemonSet, from $POD_NAME: uninstalling removes it), pod, or node (it outlives featureplug)")
	fs.BoolVar(&f.timestampLabel, "timestamp-label", false, "publish nvidia.com/gfd.timestamp as gpu-feature-discovery does; it changes at every resync, so every resync writes the NodeFeature")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.serve, "serve", string(plan.ServeDevicePlugin), "kubelet API of the resources whose rule does not say serve: device-plugin or dra (Dynamic Resource Allocation)")
	annotateEnv(fs)
	return cmd
}

// envName is the environment variable of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// annotateEnv adds each flag's environment variable to its help.
func annotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		f.Usage += " [$" + envName(f.Name) + "]"
	})
}

// applyEnv sets every flag not given on the command line from its
// environment variable.
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok || f.Changed || err != nil {
			return
		}
		if f.Value.Type() == "stringSlice" || f.Value.Type() == "uintSlice" {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				if e := sv.Replace(splitList(v)); e != nil {
					err = fmt.Errorf("$%s: %q: %w", envName(f.Name), v, e)
				}
				return
			}
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("$%s: %q: %w", envName(f.Name), v, e)
		}
	})
	return err
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// routeKlog sends klog's output (client-go's informers, reflectors, leader
// election, event broadcaster) to log, so that --log-format and --log-level
// cover it too. A V(n) message arrives at slog level -n, so --log-level
// debug shows client-go's V(1) to V(4) (reflector starts, relists).
func routeKlog(log *slog.Logger) {
	klog.SetSlogLogger(log.With("component", "client-go"))
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not a level (use debug, info, warn or error)", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format: %q is not a format (use text or json)", format)
	}
}

// kubeClients returns the API client (package kube: only the resources
// the agent uses): from --kubeconfig, from the in-cluster configuration, or
// none when neither exists and the publish mode does not need it.
func (f *runFlags) kubeClients() (kube.Interface, error) {
	var cfg *rest.Config
	var err error
	switch {
	case f.kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", f.kubeconfig, err)
		}
	default:
		cfg, err = rest.InClusterConfig()
		if err != nil {
			if f.publish == string(labeler.PublishNodeFeature) {
				return nil, fmt.Errorf("--publish nodefeature needs an API server: not in a cluster (%v) and no --kubeconfig", err)
			}
			return nil, nil
		}
	}
	cfg.UserAgent = "featureplug/" + version
	client, err := kube.New(cfg)
	if err != nil {
		return nil, err
	}
	return client, nil
}

func (f *runFlags) run(cmd *cobra.Command) error {
	afterStartup := gctune.Tune() // no collection until registered: AfterStartup below
	log, err := newLogger(f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	routeKlog(log)
	if err := applyAgentSettings(cmd.Flags(), f.rules, log); err != nil { // agentsettings.go
		return err
	}
	src, err := f.src.open()
	if err != nil {
		return err
	}
	defer src.Close()
	if fake, ok := src.(*gpusource.Fake); ok && f.nodeName == "" {
		f.nodeName = fake.Name()
	}
	// The machine type (nvidia.com/gpu.machine) comes from the host's DMI
	// product name; a fake node has none.
	var machine string
	if _, fake := src.(*gpusource.Fake); !fake {
		if machine, err = labeler.MachineType(labeler.DefaultMachineTypeFile); err != nil {
			log.Debug("no machine type label", "err", err)
		}
	}
	kubeClient, err := f.kubeClients()
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	rediscover := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case rediscover <- struct{}{}:
			default:
			}
		}
	}()
	driverRoot, mpsControl := f.src.driverRoot, f.mpsControl
	if f.src.fakeNode != "" {
		root, err := newFakeDriverRoot(f.src.driverRoot) // fakeroot.go
		if err != nil {
			return err
		}
		defer root.remove()
		driverRoot = root.dir
		if !cmd.Flags().Changed("mps-control") { // set by the flag or its environment variable
			mpsControl = root.mpsControl
		}
		log.Info("fake driver root laid out", "driverRoot", driverRoot, "mpsControl", mpsControl)
	}
	cfg := f.agentConfig(src, kubeClient, machine, log)
	cfg.RulesEngine = refuseSettingChanges(cfg.RulesEngine, cmd.Flags())
	cfg.MPS.ControlBinary, cfg.CDI.DriverRoot = mpsControl, driverRoot
	cfg.Rediscover, cfg.Stdout, cfg.AfterStartup = rediscover, cmd.OutOrStdout(), afterStartup
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	log.Info("featureplug starting", "version", version, "node", f.nodeName, "publish", f.publish,
		"rules", orDefault(f.rules, "none (builtin)"), "kubeletDir", f.kubeletDir, "pid", strconv.Itoa(os.Getpid()))
	err = a.Run(cmd.Context())
	log.Info("featureplug stopped")
	return err
}

// checkKubeletDir refuses a --kubelet-dir that is not a directory, or
// under a file, before anything starts: the device-plugin directory is
// made when missing, but a file in its place is an operator's mistake (a
// wrong path, a file mounted over it) that no retry fixes.
func checkKubeletDir(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		switch {
		case err == nil && st.IsDir():
			return nil
		case err == nil && p == filepath.Clean(dir):
			return usageErrorf("--kubelet-dir %s is not a directory (it is a %s): give the kubelet's device-plugin directory, e.g. %s",
				dir, fileKind(st.Mode()), deviceplugin.DefaultKubeletDir)
		case err == nil:
			return usageErrorf("--kubelet-dir %s cannot be made: %s is a %s, not a directory", dir, p, fileKind(st.Mode()))
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) || filepath.Dir(p) == p:
			return nil // unreadable: Run says why
		}
	}
}

// fileKind names the kind of file a mode is, for errors.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeDevice != 0:
		return "device"
	default:
		return "file of mode " + m.Type().String()
	}
}

// agentConfig is the agent's configuration from the flags, for the GPU
// source src and the API client kubeClient (nil without one).
func (f *runFlags) agentConfig(src agentconfig.GPUSource, kubeClient kube.Interface, machine string, log *slog.Logger) agentconfig.Config {
	strategies := make([]deviceplugin.DeviceListStrategy, 0, len(f.deviceList))
	for _, s := range f.deviceList {
		strategies = append(strategies, deviceplugin.DeviceListStrategy(s))
	}
	ignored := make([]uint64, len(f.ignoredXIDs))
	for i, x := range f.ignoredXIDs {
		ignored[i] = uint64(x)
	}
	return agentconfig.Config{
		NodeName:           f.nodeName,
		Namespace:          f.namespace,
		Source:             src,
		Rules:              f.rules,
		RulesEngine:        rulesengine.New(),
		DefaultServe:       plan.Serve(f.serve),
		NodeLabels:         f.nodeLabels,
		Publish:            labeler.PublishMode(f.publish),
		FeaturesFile:       f.featuresFile,
		Labels:             labeler.LabelOptions{Machine: machine},
		TimestampLabel:     f.timestampLabel,
		Owner:              f.ownerConfig(kubeClient),
		ResyncInterval:     f.resyncInterval,
		RediscoverInterval: f.rediscoverInterval,
		Kube:               kubeClient,
		Plugin: deviceplugin.Options{
			KubeletDir:           f.kubeletDir,
			DeviceListStrategies: strategies,
			DeviceIDStrategy:     deviceplugin.DeviceIDStrategy(f.deviceID),
			CDIKind:              f.cdiKind,
			CDIAnnotationPrefix:  f.cdiPrefix,
			ReplicaPolicy:        deviceplugin.ReplicaPolicy(f.replicaPolicy),
			MPSRoot:              f.mpsRoot,
		},
		MPS:               mps.Options{Root: f.mpsRoot, ControlBinary: f.mpsControl, CheckInterval: f.mpsCheckInterval},
		DRARegistryDir:    f.draRegistryDir,
		DRAPluginDir:      f.draPluginDir,
		DRAInstance:       f.draInstance(),
		CDI:               cdi.DriverConfig{SpecDir: f.cdiSpecDir, DriverRoot: f.src.driverRoot, HostDriverRoot: f.cdiHostDriverRoot, HookPath: f.cdiHookPath},
		Health:            discovery.HealthOptions{IgnoredXIDs: ignored, EvidenceInterval: f.healthEvidence},
		FileCheckInterval: f.fileCheckInterval,
		FileSettle:        f.fileSettle,
		NoInotify:         os.Getenv(noInotifyEnv) == "1",
		DRACrashAt:        os.Getenv(dynMIGCrashEnv),
		HealthRecovery:    f.healthRecovery,
		VFIOProbeInterval: f.vfioHealthInterval,
		StateDir:          prepareStateDir(f.stateDir, log),
		LivenessTimeout:   f.livenessTimeout,
		MetricsAddr:       f.metricsAddr,
		Logger:            log,
		PublishHold:       agentconfig.DefaultPublishHold,
	}
}

// prepareStateDir creates the state directory (0700) and returns it, or
// returns "" (no persistence) with a warning when it cannot be created.
func prepareStateDir(dir string, log *slog.Logger) string {
	if dir == "" {
		log.Info("no --state-dir: unhealthy devices are not remembered across restarts")
		return ""
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn("cannot create the state directory; running without persistence (unhealthy devices are not remembered across restarts)",
			"stateDir", dir, "err", err)
		return ""
	}
	return dir
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// draInstance names the DRA sockets for rolling updates: the pod's UID,
// or "" without --dra-rolling-update or outside a pod.
func (f *runFlags) draInstance() string {
	if !f.draRollingUpdate {
		return ""
	}
	return os.Getenv(podUIDEnv)
}
