package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

// KubeletDRA is the kubelet's own DRA side (k8s.io/kubernetes
// pkg/kubelet/cm/dra, the code a real kubelet runs) for one Node: its plugin
// manager watches a plugin registration directory of the test's choosing and
// registers the DRA drivers whose registration sockets appear there (and
// deregisters them when the sockets go); its DRA manager prepares a pod's
// ResourceClaims through the drivers' NodePrepareResources, hands out the CDI
// device IDs they returned, checkpoints prepared claims in its own state
// directory, and unprepares them through NodeUnprepareResources.
//
// Like the kubelet, it reads ResourceClaims from the API server, and at start
// deletes every ResourceSlice of its Node (no driver has registered yet);
// when a driver's registration socket goes away and the driver does not come
// back within 30 seconds, it deletes that driver's ResourceSlices of the Node.
type KubeletDRA struct {
	// RegistryDir is the plugin registration directory (the kubelet's
	// /var/lib/kubelet/plugins_registry): drivers put their registration
	// sockets here.
	RegistryDir string
	// StateDir holds the DRA manager's checkpoint of prepared claims.
	StateDir string
	// NodeName is the Node the kubelet runs as.
	NodeName string
	// LogPath is the DRA manager's and plugin manager's log file.
	LogPath string

	mgr     *dra.Manager
	drivers *draplugin.DRAPluginManager
	logger  klog.Logger
	logFile *os.File
	cancel  context.CancelFunc
	stopCh  chan struct{}
	done    chan struct{} // closed when the plugin manager's Run returned

	podsMu sync.Mutex // guards pods
	pods   map[types.UID]*v1.Pod
	stop   sync.Once
}

// StartKubeletDRA starts the kubelet's DRA manager and plugin manager for
// the Node nodeName (which must exist in api), watching registryDir for
// driver registration sockets (created if needed). It returns once the
// kubelet's start-up wipe of the Node's ResourceSlices is done, so that a
// driver started afterwards publishes into a clean slate, as on a real node
// where the kubelet runs before the drivers. It needs no root. Everything
// stops when the test ends; the log is printed when the test failed.
func StartKubeletDRA(t testing.TB, api *APIServer, nodeName, registryDir string) *KubeletDRA {
	t.Helper()
	logFile, err := createLog(LogDir(t), "kubelet-dra")
	if err != nil {
		t.Fatalf("kubelet DRA manager: %v", err)
	}
	logPath := logFile.Name()
	ctx, cancel := context.WithTimeout(context.Background(), controlPlaneStartTimeout)
	defer cancel()
	k, err := startKubeletDRA(ctx, api.Config, nodeName, registryDir, t.TempDir(), logFile)
	if err != nil {
		t.Fatalf("starting the kubelet DRA manager for node %s in %s: %v", nodeName, registryDir, err)
	}
	t.Cleanup(func() {
		k.Stop()
		if t.Failed() {
			t.Logf("--- last %d lines of kubelet-dra log (%s):\n%s", logTailLines, logPath, fileTail(logPath, logTailLines))
		}
	})
	return k
}

func startKubeletDRA(ctx context.Context, cfg *rest.Config, nodeName, registryDir, stateDir string, logFile *os.File) (*KubeletDRA, error) {
	fail := func(err error) (*KubeletDRA, error) {
		logFile.Close()
		return nil, err
	}
	registryDir, err := filepath.Abs(registryDir)
	if err != nil {
		return fail(fmt.Errorf("resolving %q: %w", registryDir, err))
	}
	if err := os.MkdirAll(registryDir, 0o750); err != nil {
		return fail(fmt.Errorf("creating the plugin registration directory: %w", err))
	}
	// The kubelet deletes the Node's ResourceSlices in the background at
	// start; the transport tells when that delete went through.
	wiped := make(chan struct{})
	var wipedOnce sync.Once
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && req.Method == http.MethodDelete && resp.StatusCode < 300 &&
				strings.HasSuffix(req.URL.Path, "/resourceslices") {
				wipedOnce.Do(func() { close(wiped) })
			}
			return resp, err
		})
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fail(fmt.Errorf("creating the kubelet's client: %w", err))
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err != nil {
		return fail(fmt.Errorf("the kubelet's Node: %w", err))
	}

	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(5)))
	mgr, err := dra.NewManager(logger, client, stateDir)
	if err != nil {
		return fail(fmt.Errorf("creating the DRA manager: %w", err))
	}
	k := &KubeletDRA{
		RegistryDir: registryDir,
		StateDir:    stateDir,
		NodeName:    nodeName,
		LogPath:     logFile.Name(),
		mgr:         mgr,
		logger:      logger,
		logFile:     logFile,
		stopCh:      make(chan struct{}),
		done:        make(chan struct{}),
		pods:        make(map[types.UID]*v1.Pod),
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	k.cancel = cancel
	getNode := func(ctx context.Context) (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	}
	if err := mgr.Start(runCtx, k.activePods, getNode, allSourcesReady{}); err != nil {
		cancel()
		return fail(fmt.Errorf("starting the DRA manager: %w", err))
	}
	drivers, ok := mgr.GetWatcherHandler().(*draplugin.DRAPluginManager)
	if !ok {
		mgr.Stop()
		cancel()
		return fail(fmt.Errorf("the DRA manager's plugin handler is a %T, not a *DRAPluginManager", mgr.GetWatcherHandler()))
	}
	k.drivers = drivers

	pm := pluginmanager.NewPluginManager(registryDir, &record.FakeRecorder{})
	pm.AddHandler(registerapi.DRAPlugin, drivers)
	go func() {
		defer close(k.done)
		pm.Run(runCtx, allSourcesReady{}, k.stopCh)
	}()

	select {
	case <-wiped:
	case <-ctx.Done():
		k.Stop()
		return nil, fmt.Errorf("waiting for the kubelet's start-up delete of node %s's ResourceSlices: %w", nodeName, ctx.Err())
	}
	return k, nil
}

// Stop stops the plugin manager and the DRA manager, closing the
// connections to every driver, as a kubelet shutting down does. The drivers'
// prepared claims stay prepared. It is safe to call more than once.
func (k *KubeletDRA) Stop() {
	k.stop.Do(func() {
		close(k.stopCh)
		<-k.done
		k.cancel()
		k.mgr.Stop()
		k.logFile.Close()
	})
}

// WaitRegistered waits until the driver has registered through the
// registration directory and the kubelet can call it.
func (k *KubeletDRA) WaitRegistered(ctx context.Context, driver string) error {
	return poll(ctx, func() (bool, string, error) {
		if _, err := k.drivers.GetPlugin(driver); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

// WaitUnregistered waits until the driver is no longer registered (its
// registration socket went away).
func (k *KubeletDRA) WaitUnregistered(ctx context.Context, driver string) error {
	return poll(ctx, func() (bool, string, error) {
		if _, err := k.drivers.GetPlugin(driver); err == nil {
			return false, "driver " + driver + " is registered", nil
		}
		return true, "", nil
	})
}

// PreparePod admits pod (as the API server has it: bound to this Node, with
// its ResourceClaims allocated and reserved for it, and for extended
// resources backed by DRA the claim the scheduler made, in
// status.extendedResourceClaimStatus) and prepares its claims through their
// drivers' NodePrepareResources, as the kubelet does before it starts the
// pod's containers. It returns the CDI device IDs each container gets, by
// container name (sorted). The pod stays active until UnpreparePod.
func (k *KubeletDRA) PreparePod(ctx context.Context, pod *v1.Pod) (map[string][]string, error) {
	if pod.UID == "" {
		return nil, fmt.Errorf("pod %s/%s has no UID", pod.Namespace, pod.Name)
	}
	ctx = klog.NewContext(ctx, k.logger)
	k.setPod(pod)
	if err := k.mgr.PrepareResources(ctx, pod); err != nil {
		return nil, fmt.Errorf("preparing the claims of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	out := map[string][]string{}
	containers := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range containers {
		c := &containers[i]
		info, err := k.mgr.GetResources(pod, c)
		if err != nil {
			return nil, fmt.Errorf("the CDI devices of pod %s/%s container %s: %w", pod.Namespace, pod.Name, c.Name, err)
		}
		var ids []string
		for _, d := range info.CDIDevices {
			ids = append(ids, d.Name)
		}
		sort.Strings(ids)
		out[c.Name] = ids
	}
	return out, nil
}

// UnpreparePod unprepares pod's claims through their drivers'
// NodeUnprepareResources, as the kubelet does once the pod's containers are
// gone, and ends the pod. It is idempotent, like the kubelet's.
func (k *KubeletDRA) UnpreparePod(ctx context.Context, pod *v1.Pod) error {
	ctx = klog.NewContext(ctx, k.logger)
	if err := k.mgr.UnprepareResources(ctx, pod); err != nil {
		return fmt.Errorf("unpreparing the claims of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	k.podsMu.Lock()
	delete(k.pods, pod.UID)
	k.podsMu.Unlock()
	return nil
}

// AllocatedResourcesStatus returns what the kubelet would put in pod's
// status for its containers' DRA devices: one ContainerStatus per container
// of the pod (Name set), with AllocatedResourcesStatus filled by the DRA
// manager from the device health the drivers reported through
// DRAResourceHealth for the devices of the pod's prepared claims.
func (k *KubeletDRA) AllocatedResourcesStatus(pod *v1.Pod) []v1.ContainerStatus {
	status := &v1.PodStatus{}
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{Name: c.Name})
	}
	k.mgr.UpdateAllocatedResourcesStatus(k.logger, pod, status)
	return status.ContainerStatuses
}

// activePods is the DRA manager's view of the pods on the node: its
// reconcile loop unprepares the claims of pods not in it.
func (k *KubeletDRA) activePods() []*v1.Pod {
	k.podsMu.Lock()
	defer k.podsMu.Unlock()
	out := make([]*v1.Pod, 0, len(k.pods))
	for _, pod := range k.pods {
		out = append(out, pod)
	}
	return out
}

func (k *KubeletDRA) setPod(pod *v1.Pod) {
	k.podsMu.Lock()
	defer k.podsMu.Unlock()
	k.pods[pod.UID] = pod
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
