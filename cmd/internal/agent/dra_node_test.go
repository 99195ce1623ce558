package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/dra"
	"github.com/featureplug/featureplug/rules/plan"
)

// draNodeRules serves GPU 0 of dgx-h100 as example.com/a through serve
// and the other GPUs as example.com/b by device plugin.
func draNodeRules(serve plan.Serve) []byte {
	return []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: a
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {index: {op: In, value: ["0"]}}}]
  resource: example.com/a
  serve: ` + string(serve) + `
- name: b
  devices: gpu
  resource: example.com/b
  serve: device-plugin
`)
}

// draNodeEnv is what the tests of the kubelet-facing DRA driver share.
type draNodeEnv struct {
	dir, regDir, plugDir, stateDir, rules string
	kube                                  *kubefake.Clientset
}

func newDRANodeEnv(t *testing.T) *draNodeEnv {
	t.Helper()
	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "fpdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	e := &draNodeEnv{
		dir: dir, regDir: filepath.Join(dir, "reg"), plugDir: filepath.Join(dir, "plug"),
		stateDir: filepath.Join(dir, "state"), rules: filepath.Join(dir, "rules.yaml"),
		kube: kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-n"}}),
	}
	if err := os.Mkdir(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	return e
}

// writeRules replaces the rules file (renamed into place).
func (e *draNodeEnv) writeRules(t *testing.T, serve plan.Serve) {
	t.Helper()
	tmp := e.rules + ".tmp"
	if err := os.WriteFile(tmp, draNodeRules(serve), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.rules); err != nil {
		t.Fatal(err)
	}
}

// start runs an agent on the environment until stop is called (or the
// test ends); it returns the agent, its log records and stop.
func (e *draNodeEnv) start(t *testing.T) (*Agent, kubeRecords, func()) {
	t.Helper()
	src, err := gpusource.OpenFake("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	records := make(kubeRecords, 4096)
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Rules: e.rules, RulesEngine: testRulesEngine(),
		Kube:   kubeclientset.New(e.kube, nil),
		Plugin: deviceplugin.Options{KubeletDir: filepath.Join(e.dir, "dp")}, StateDir: e.stateDir,
		CDI:                cdi.DriverConfig{SpecDir: filepath.Join(e.dir, "cdi"), DriverRoot: t.TempDir()},
		DRARegistryDir:     e.regDir,
		DRAPluginDir:       e.plugDir,
		RediscoverInterval: time.Hour,
		FileSettle:         time.Millisecond,
		FileCheckInterval:  50 * time.Millisecond,
		Logger:             slog.New(records),
	})
	if err != nil {
		src.Close()
		t.Fatal(err)
	}
	_, stopRun := startAgentRun(t, a)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			stopRun()
			src.Close()
		})
	}
	t.Cleanup(stop)
	return a, records, stop
}

// dial connects to a unix socket for the test.
func draNodeDial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// draNodeWaitSocket waits until path exists.
func draNodeWaitSocket(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		if _, err := os.Lstat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDRANodeServesOnceDRAIsUsed: an agent whose rules serve nothing
// through DRA makes no socket in the kubelet's directories; a rules edit
// moving a resource to DRA starts the kubelet-facing driver, which the
// kubelet registers, and a claim allocated the resource's device is
// prepared with the CDI ID of the DRA sink's table. After a restart with
// rules that serve nothing through DRA, the checkpointed claim still has
// its server: prepared again from the checkpoint, then unprepared.
func TestDRANodeServesOnceDRAIsUsed(t *testing.T) {
	e := newDRANodeEnv(t)
	e.writeRules(t, plan.ServeDevicePlugin)
	a, records, stop := e.start(t)
	regSock := filepath.Join(e.regDir, dra.RegistrationSocketName)
	draSock := filepath.Join(e.plugDir, dra.PluginSocketName)

	kubeWaitRecord(t, records, "plan applied", "trigger=start")
	for _, p := range []string{regSock, draSock} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s exists (%v) while nothing is served through DRA", p, err)
		}
	}

	e.writeRules(t, plan.ServeDRA)
	kubeWaitRecord(t, records, "starting the kubelet-facing DRA driver", "why=a resource is served through DRA")
	draNodeWaitSocket(t, regSock)
	// The file exists a moment before the socket listens: wait for it.
	wctx, wcancel := context.WithTimeout(context.Background(), testWait)
	defer wcancel()
	info, err := registerapi.NewRegistrationClient(draNodeDial(t, regSock)).GetInfo(wctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil || info.GetName() != dra.DriverName || info.GetEndpoint() != draSock {
		t.Fatalf("GetInfo = %v, %v", info, err)
	}

	inv := a.current.Load()
	device := draattr.DeviceName(inv.GPUs[0].UUID)
	want, ok := sinkOf[*dra.Sink](t, a).Table().Lookup(device)
	if !ok || len(want.CDIDevices) == 0 || want.Resource != "example.com/a" {
		t.Fatalf("the DRA table has %v, %v for %s", want, ok, device)
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "uid-c"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dra.DriverName, Pool: "n", Device: device}},
		}}},
	}
	if _, err := e.kube.ResourceV1().ResourceClaims("ns").Create(context.Background(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	req := &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{{Namespace: "ns", Name: "c", Uid: "uid-c"}}}
	prepare := func(what string) {
		t.Helper()
		resp, err := drapbv1.NewDRAPluginClient(draNodeDial(t, draSock)).NodePrepareResources(wctx, req, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		r := resp.GetClaims()["uid-c"]
		if r.GetError() != "" || len(r.GetDevices()) != 1 || r.GetDevices()[0].GetDeviceName() != device ||
			!reflect.DeepEqual(r.GetDevices()[0].GetCdiDeviceIds(), want.CDIDevices) {
			t.Fatalf("%s: %v, want %s with %v", what, r, device, want.CDIDevices)
		}
	}
	prepare("prepare")
	stop()

	// Restarted with rules that serve nothing through DRA (and the claim
	// gone from the API server): the checkpoint starts the server.
	e.writeRules(t, plan.ServeDevicePlugin)
	if err := e.kube.ResourceV1().ResourceClaims("ns").Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, records, _ = e.start(t)
	kubeWaitRecord(t, records, "starting the kubelet-facing DRA driver", "why=prepared claims in the checkpoint")
	draNodeWaitSocket(t, regSock)
	prepare("prepare after a restart")
	resp, err := drapbv1.NewDRAPluginClient(draNodeDial(t, draSock)).NodeUnprepareResources(wctx,
		&drapbv1.NodeUnprepareResourcesRequest{Claims: req.Claims}, grpc.WaitForReady(true))
	if err != nil || resp.GetClaims()["uid-c"] == nil || resp.GetClaims()["uid-c"].GetError() != "" {
		t.Fatalf("unprepare after a restart: %v, %v", resp, err)
	}
	data, err := os.ReadFile(filepath.Join(e.stateDir, dra.CheckpointFile))
	if err != nil || strings.Contains(string(data), "uid-c") {
		t.Errorf("checkpoint after unprepare: %s, %v", data, err)
	}
}

// TestDRANodeReportsHealth: the kubelet's device health stream
// (DRAResourceHealth v1) reports the DRA device HEALTHY, then an XID on
// its GPU reaches it as UNHEALTHY with the taint's reason, through the
// DRA sink's new Table and dra.Node.TableChanged (not a later heartbeat).
func TestDRANodeReportsHealth(t *testing.T) {
	e := newDRANodeEnv(t)
	e.writeRules(t, plan.ServeDRA)
	a, records, _ := e.start(t)
	draSock := filepath.Join(e.plugDir, dra.PluginSocketName)
	kubeWaitRecord(t, records, "starting the kubelet-facing DRA driver")
	draNodeWaitSocket(t, draSock)

	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	// A report stamped before opened+HealthHeartbeat was not sent by a
	// heartbeat: the stream's first heartbeat comes that long after it
	// opens.
	opened := time.Now().Unix()
	stream, err := drahealthv1.NewDRAResourceHealthClient(draNodeDial(t, draSock)).
		NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	gpu0 := a.current.Load().GPUs[0].UUID
	device := draattr.DeviceName(gpu0)
	// next receives reports until device has health want.
	next := func(want drahealthv1.HealthStatus, message string) {
		t.Helper()
		for {
			m, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for %s %s: %v", device, want, err)
			}
			devs := m.GetDevices()
			if len(devs) != 1 || devs[0].GetDevice().GetPoolName() != "n" || devs[0].GetDevice().GetDeviceName() != device {
				t.Fatalf("health report %v, want only n/%s", m, device)
			}
			if devs[0].GetHealth() == want {
				if devs[0].GetMessage() != message {
					t.Fatalf("%s %s with message %q, want %q", device, want, devs[0].GetMessage(), message)
				}
				if at := devs[0].GetLastUpdatedTime(); at >= opened+int64(dra.HealthHeartbeat/time.Second) {
					t.Fatalf("%s %s reported by a heartbeat (at %d, the stream opened at %d), not when the Table changed", device, want, at, opened)
				}
				return
			}
		}
	}
	next(drahealthv1.HealthStatus_HEALTHY, "")
	a.health.Record(discovery.HealthEvent{GPUUUID: gpu0, Kind: discovery.EventXID, XID: 79, Time: time.Now()})
	next(drahealthv1.HealthStatus_UNHEALTHY, "xid-79")
}
