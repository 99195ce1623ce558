package dra

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/featureplug/featureplug/rules/plan"
)

// nodeTestNode is the node name of the tests' pool.
const nodeTestNode = "node-a"

// nodeTestTimeout bounds every wait of these tests.
const nodeTestTimeout = 30 * time.Second

// nodeClaims is the ResourceClaims of every namespace over a map,
// counting its calls.
type nodeClaims struct {
	mu     sync.Mutex
	claims map[string]*resourceapi.ResourceClaim // by namespace/name
	err    error                                 // returned for every Get when set
	gets   int
	// patches are the Patch calls; patchErr is returned for each when set.
	patches  []nodePatch
	patchErr error
}

// nodePatch is one Patch call of a test's claims.
type nodePatch struct {
	namespace, name string
	pt              types.PatchType
	data            []byte
	opts            metav1.PatchOptions
	subresources    []string
}

// in returns the ResourceClaims of namespace (NodeOptions.Claims).
func (c *nodeClaims) in(namespace string) ResourceClaims { return nodeClaimsIn{c, namespace} }

// nodeClaimsIn is nodeClaims in one namespace.
type nodeClaimsIn struct {
	c         *nodeClaims
	namespace string
}

// Get implements ResourceClaims.
func (n nodeClaimsIn) Get(ctx context.Context, name string, _ metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
	return n.c.get(ctx, n.namespace, name)
}

// Patch implements ResourceClaims: it records the call.
func (n nodeClaimsIn) Patch(_ context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*resourceapi.ResourceClaim, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.patches = append(c.patches, nodePatch{n.namespace, name, pt, data, opts, subresources})
	if c.patchErr != nil {
		return nil, c.patchErr
	}
	return &resourceapi.ResourceClaim{}, nil
}

// patchCalls returns the Patch calls so far.
func (c *nodeClaims) patchCalls() []nodePatch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]nodePatch(nil), c.patches...)
}

func (c *nodeClaims) get(_ context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets++
	if c.err != nil {
		return nil, c.err
	}
	cl, ok := c.claims[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, name)
	}
	return cl.DeepCopy(), nil
}

func (c *nodeClaims) add(cl *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims = map[string]*resourceapi.ResourceClaim{}
	}
	c.claims[cl.Namespace+"/"+cl.Name] = cl
}

func (c *nodeClaims) getCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets
}

// nodeResult is one allocation result of a test claim.
type nodeResult struct {
	request, driver, pool, device string
	share                         string
}

// nodeClaim is an allocated claim (unallocated without results).
func nodeClaim(ns, name, uid string, results ...nodeResult) *resourceapi.ResourceClaim {
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	if len(results) == 0 {
		return cl
	}
	cl.Status.Allocation = &resourceapi.AllocationResult{}
	for _, r := range results {
		res := resourceapi.DeviceRequestAllocationResult{Request: r.request, Driver: r.driver, Pool: r.pool, Device: r.device}
		if r.share != "" {
			id := types.UID(r.share)
			res.ShareID = &id
		}
		cl.Status.Allocation.Devices.Results = append(cl.Status.Allocation.Devices.Results, res)
	}
	return cl
}

// nodeOurs is an allocation result of this driver and node.
func nodeOurs(request, device string) nodeResult {
	return nodeResult{request: request, driver: DriverName, pool: nodeTestNode, device: device}
}

// nodeTable has two devices with CDI IDs and one without.
func nodeTable() *Table {
	return NewTable([]Device{
		{Name: "gpu-0000", Resource: "example.com/a100", CDIDevices: []string{"k8s.featureplug.io/gpu=GPU-0000"},
			Device: plan.Device{ID: "GPU-0000", Kind: plan.DeviceGPU}, PCIBusID: "0000:07:00.0", Product: "NVIDIA A100-SXM4-80GB"},
		{Name: "mig-1111", Resource: "example.com/mig-1g", CDIDevices: []string{"k8s.featureplug.io/gpu=MIG-1111"},
			Device: plan.Device{ID: "MIG-1111", Kind: plan.DeviceMIG, Profile: "1g.10gb"}, PCIBusID: "0000:0f:00.0", Product: "NVIDIA A100-SXM4-40GB"},
		{Name: "gpu-nocdi", Resource: "example.com/a100"},
	})
}

// nodeEnv is a running Node with a kubelet-side client.
type nodeEnv struct {
	t        *testing.T
	n        *Node
	reg      *prometheus.Registry
	claims   *nodeClaims
	logs     *nodeLogBuffer
	stateDir string
	regDir   string
	plugDir  string
	cancel   context.CancelFunc
	done     chan error
}

// nodeLogBuffer collects log output safely.
type nodeLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *nodeLogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *nodeLogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runWatcher runs a file watcher checking every interval until the test
// ends, for a Node given it in NodeOptions.Watcher.
func runWatcher(t *testing.T, interval time.Duration) *fswatch.Watcher {
	t.Helper()
	w := fswatch.New(fswatch.Options{Interval: interval})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}

// newNodeEnv makes a Node (not yet running) in fresh directories, or in
// stateDir's when it is not empty.
func newNodeEnv(t *testing.T, stateDir string, claims *nodeClaims, table func() *Table) *nodeEnv {
	t.Helper()
	root := kubeletsim.ShortTempDir(t)
	if stateDir == "" {
		stateDir = filepath.Join(root, "state")
	}
	e := &nodeEnv{
		t: t, claims: claims, stateDir: stateDir,
		regDir: filepath.Join(root, "reg"), plugDir: filepath.Join(root, "plug"),
	}
	return e.another("", table)
}

// another makes a Node (not yet running) in e's directories, with its own
// metrics and logs, named instance for rolling updates ("" for none).
func (e *nodeEnv) another(instance string, table func() *Table) *nodeEnv {
	e.t.Helper()
	o := &nodeEnv{
		t: e.t, reg: prometheus.NewRegistry(), claims: e.claims, logs: &nodeLogBuffer{}, stateDir: e.stateDir,
		regDir: e.regDir, plugDir: e.plugDir,
	}
	n, err := NewNode(NodeOptions{
		NodeName: nodeTestNode, RegistryDir: o.regDir, PluginDir: o.plugDir, StateDir: o.stateDir, Instance: instance,
		Claims: o.claims.in, Table: table, Watcher: runWatcher(e.t, 20*time.Millisecond),
		Logger:     slog.New(slog.NewTextHandler(o.logs, nil)),
		Registerer: o.reg,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	o.n = n
	return o
}

// start runs the node until the test ends (or stop).
func (e *nodeEnv) start() *nodeEnv {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- e.n.Run(ctx) }()
	e.t.Cleanup(e.stop)
	e.waitFor("both sockets serve", func() bool {
		return e.metric("featureplug_dra_socket_starts_total", "socket", "registration") >= 1
	})
	return e
}

// stop stops the node and checks that Run returned nil.
func (e *nodeEnv) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	if err := <-e.done; err != nil {
		e.t.Errorf("Run: %v", err)
	}
}

// waitFor polls cond until it holds.
func (e *nodeEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(nodeTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting until %s; logs:\n%s", what, e.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metric returns the value of a metric with one label pair (none when
// label is ""), 0 when absent.
func (e *nodeEnv) metric(name, label, value string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && !nodeHasLabel(m, label, value) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func nodeHasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// dial connects to a unix socket.
func (e *nodeEnv) dial(path string) *grpc.ClientConn {
	e.t.Helper()
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// v1 is a DRA v1 client, as the 1.37 kubelet uses.
func (e *nodeEnv) v1() drapbv1.DRAPluginClient {
	return drapbv1.NewDRAPluginClient(e.dial(e.n.PluginSocket()))
}

func (e *nodeEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), nodeTestTimeout)
	e.t.Cleanup(cancel)
	return ctx
}

// prepare prepares claims over v1 and fails the test on a call error.
func (e *nodeEnv) prepare(c drapbv1.DRAPluginClient, claims ...*drapbv1.Claim) map[string]*drapbv1.NodePrepareResourceResponse {
	e.t.Helper()
	resp, err := c.NodePrepareResources(e.ctx(), &drapbv1.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		e.t.Fatalf("NodePrepareResources: %v", err)
	}
	return resp.GetClaims()
}

// unprepare unprepares claims over v1 and fails the test on a call error.
func (e *nodeEnv) unprepare(c drapbv1.DRAPluginClient, claims ...*drapbv1.Claim) map[string]*drapbv1.NodeUnprepareResourceResponse {
	e.t.Helper()
	resp, err := c.NodeUnprepareResources(e.ctx(), &drapbv1.NodeUnprepareResourcesRequest{Claims: claims})
	if err != nil {
		e.t.Fatalf("NodeUnprepareResources: %v", err)
	}
	return resp.GetClaims()
}

// checkpoint reads the checkpoint file.
func (e *nodeEnv) checkpoint() checkpointState {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(e.stateDir, CheckpointFile))
	if err != nil {
		e.t.Fatal(err)
	}
	var st checkpointState
	if err := json.Unmarshal(data, &st); err != nil {
		e.t.Fatalf("%s: %v", data, err)
	}
	return st
}

func nodeClaimRef(cl *resourceapi.ResourceClaim) *drapbv1.Claim {
	return &drapbv1.Claim{Namespace: cl.Namespace, Name: cl.Name, Uid: string(cl.UID)}
}

// nodeDevices describes a prepared claim's devices as
// "request pool/device cdi,cdi [share]".
func nodeDevices(r *drapbv1.NodePrepareResourceResponse) []string {
	var out []string
	for _, d := range r.GetDevices() {
		s := fmt.Sprintf("%s %s/%s %s", strings.Join(d.GetRequestNames(), ","), d.GetPoolName(), d.GetDeviceName(), strings.Join(d.GetCdiDeviceIds(), ","))
		if d.ShareId != nil {
			s += " share=" + d.GetShareId()
		}
		out = append(out, s)
	}
	return out
}

// TestNodeRegistration: the registration socket answers GetInfo as the
// 1.37 kubelet's plugin watcher needs it (a DRA plugin, the driver's name,
// the DRA socket, v1 then v1beta1, then the device health service v1
// and v1alpha1), and a status the kubelet reports is
// logged (with the refusal's reason) and counted.
func TestNodeRegistration(t *testing.T) {
	e := newNodeEnv(t, "", &nodeClaims{}, nodeTable).start()
	if got, want := e.n.RegistrationSocket(), filepath.Join(e.regDir, "gpu.featureplug.io-reg.sock"); got != want {
		t.Fatalf("registration socket %s, want %s", got, want)
	}
	rc := registerapi.NewRegistrationClient(e.dial(e.n.RegistrationSocket()))
	info, err := rc.GetInfo(e.ctx(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &registerapi.PluginInfo{
		Type:              "DRAPlugin",
		Name:              "gpu.featureplug.io",
		Endpoint:          filepath.Join(e.plugDir, "dra.sock"),
		SupportedVersions: []string{"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"},
	}
	if info.GetType() != want.Type || info.GetName() != want.Name || info.GetEndpoint() != want.Endpoint ||
		!reflect.DeepEqual(info.GetSupportedVersions(), want.SupportedVersions) {
		t.Fatalf("GetInfo = %v, want %v", info, want)
	}

	if _, err := rc.NotifyRegistrationStatus(e.ctx(), &registerapi.RegistrationStatus{PluginRegistered: false, Error: "endpoint busy"}); err != nil {
		t.Fatal(err)
	}
	if got := e.metric("featureplug_dra_registrations_total", "result", "refused"); got != 1 {
		t.Errorf("registrations_total{refused} = %v, want 1", got)
	}
	if got := e.metric("featureplug_dra_registered", "", ""); got != 0 {
		t.Errorf("registered = %v after a refusal, want 0", got)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "the kubelet refused the DRA driver's registration") || !strings.Contains(logs, `reason="endpoint busy"`) {
		t.Errorf("the refusal is not logged with its reason:\n%s", logs)
	}
	if _, err := rc.NotifyRegistrationStatus(e.ctx(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if got := e.metric("featureplug_dra_registered", "", ""); got != 1 {
		t.Errorf("registered = %v after a success, want 1", got)
	}
}

// TestNodePrepareUnprepare: a claim allocated one of this node's devices
// is prepared with the device's CDI IDs (v1 and v1beta1 alike), only this
// driver's results are taken, the request names lose their subrequest,
// the share ID is passed on, the checkpoint holds it, and unprepare
// removes it (and succeeds again for a claim no longer prepared).
func TestNodePrepareUnprepare(t *testing.T) {
	claims := &nodeClaims{}
	a := nodeClaim("ns1", "claim-a", "uid-a",
		nodeOurs("gpu/big", "gpu-0000"),
		nodeResult{request: "nic", driver: "nic.example.com", pool: nodeTestNode, device: "eth0"})
	b := nodeClaim("ns1", "claim-b", "uid-b", nodeResult{request: "mig", driver: DriverName, pool: nodeTestNode, device: "mig-1111", share: "share-1"})
	claims.add(a)
	claims.add(b)
	e := newNodeEnv(t, "", claims, nodeTable).start()
	c := e.v1()

	got := e.prepare(c, nodeClaimRef(a))
	if r := got["uid-a"]; r.GetError() != "" || !reflect.DeepEqual(nodeDevices(r), []string{"gpu node-a/gpu-0000 k8s.featureplug.io/gpu=GPU-0000"}) {
		t.Fatalf("prepare a = %v (error %q)", nodeDevices(r), r.GetError())
	}
	// The same through v1beta1, which older kubelets use.
	v1b := drapbv1beta1.NewDRAPluginClient(e.dial(e.n.PluginSocket()))
	bresp, err := v1b.NodePrepareResources(e.ctx(), &drapbv1beta1.NodePrepareResourcesRequest{
		Claims: []*drapbv1beta1.Claim{{Namespace: "ns1", Name: "claim-b", Uid: "uid-b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rb := bresp.GetClaims()["uid-b"]
	if rb.GetError() != "" || len(rb.GetDevices()) != 1 || rb.GetDevices()[0].GetDeviceName() != "mig-1111" ||
		!reflect.DeepEqual(rb.GetDevices()[0].GetCdiDeviceIds(), []string{"k8s.featureplug.io/gpu=MIG-1111"}) {
		t.Fatalf("prepare b over v1beta1 = %v", rb)
	}
	// v1 has the share ID (v1beta1 has no field for it); this answer
	// comes from the checkpoint.
	if r := e.prepare(c, nodeClaimRef(b))["uid-b"]; !reflect.DeepEqual(nodeDevices(r), []string{"mig node-a/mig-1111 k8s.featureplug.io/gpu=MIG-1111 share=share-1"}) {
		t.Fatalf("prepare b over v1 = %v (error %q)", nodeDevices(r), r.GetError())
	}
	if got := e.metric("featureplug_dra_prepare_total", "result", "prepared"); got != 2 {
		t.Errorf("prepare_total{prepared} = %v, want 2", got)
	}
	if got := e.metric("featureplug_dra_prepared_claims", "", ""); got != 2 {
		t.Errorf("prepared_claims = %v, want 2", got)
	}
	ck := e.checkpoint()
	wantCk := []PreparedClaim{
		{UID: "uid-a", Namespace: "ns1", Name: "claim-a", Devices: []PreparedDevice{{Requests: []string{"gpu"}, Pool: nodeTestNode, Device: "gpu-0000", CDIDeviceIDs: []string{"k8s.featureplug.io/gpu=GPU-0000"},
			Status: &DeviceStatusData{UUID: "GPU-0000", PCIBusID: "0000:07:00.0", ProductName: "NVIDIA A100-SXM4-80GB", Resource: "example.com/a100"}}}},
		{UID: "uid-b", Namespace: "ns1", Name: "claim-b", Devices: []PreparedDevice{{Requests: []string{"mig"}, Pool: nodeTestNode, Device: "mig-1111", CDIDeviceIDs: []string{"k8s.featureplug.io/gpu=MIG-1111"}, ShareID: "share-1",
			Status: &DeviceStatusData{UUID: "MIG-1111", PCIBusID: "0000:0f:00.0", ProductName: "NVIDIA A100-SXM4-40GB", MIGProfile: "1g.10gb", Resource: "example.com/mig-1g"}}}},
	}
	if ck.Version != 1 || !reflect.DeepEqual(ck.Claims, wantCk) {
		t.Fatalf("checkpoint = %+v, want %+v", ck, wantCk)
	}

	un := e.unprepare(c, nodeClaimRef(a))
	if r, ok := un["uid-a"]; !ok || r.GetError() != "" {
		t.Fatalf("unprepare a = %v", un)
	}
	if ck := e.checkpoint(); len(ck.Claims) != 1 || ck.Claims[0].UID != "uid-b" {
		t.Fatalf("checkpoint after unprepare = %+v, want only uid-b", ck)
	}
	// Again: the kubelet retries; a claim not prepared is a success.
	if un := e.unprepare(c, nodeClaimRef(a)); un["uid-a"] == nil || un["uid-a"].GetError() != "" {
		t.Fatalf("second unprepare a = %v", un)
	}
	if got := e.metric("featureplug_dra_unprepare_total", "result", "unknown"); got != 1 {
		t.Errorf("unprepare_total{unknown} = %v, want 1", got)
	}
	if got := e.metric("featureplug_dra_prepared_claims", "", ""); got != 1 {
		t.Errorf("prepared_claims = %v, want 1", got)
	}
	// Prepared again after unprepare: read from the API server anew.
	before := claims.getCount()
	if r := e.prepare(c, nodeClaimRef(a))["uid-a"]; r.GetError() != "" {
		t.Fatalf("prepare a again: %s", r.GetError())
	}
	if claims.getCount() != before+1 {
		t.Errorf("prepare after unprepare made %d API reads, want 1", claims.getCount()-before)
	}
}

// TestNodePrepareErrors: each claim that cannot be prepared gets its own
// error naming the claim (namespace/name and uid), the device and why; the
// good claim of the same request is prepared, and nothing bad is
// checkpointed.
func TestNodePrepareErrors(t *testing.T) {
	claims := &nodeClaims{}
	good := nodeClaim("ns", "good", "uid-good", nodeOurs("gpu", "gpu-0000"))
	replaced := nodeClaim("ns", "replaced", "uid-new", nodeOurs("gpu", "gpu-0000"))
	claims.add(good)
	claims.add(replaced)
	claims.add(nodeClaim("ns", "unallocated", "uid-unalloc"))
	claims.add(nodeClaim("ns", "foreign", "uid-foreign", nodeResult{request: "nic", driver: "nic.example.com", pool: nodeTestNode, device: "eth0"}))
	claims.add(nodeClaim("ns", "otherpool", "uid-otherpool", nodeResult{request: "gpu", driver: DriverName, pool: "node-b", device: "gpu-0000"}))
	claims.add(nodeClaim("ns", "unknown", "uid-unknown", nodeOurs("gpu", "gpu-9999")))
	claims.add(nodeClaim("ns", "nocdi", "uid-nocdi", nodeOurs("gpu", "gpu-nocdi")))
	claims.add(nodeClaim("ns", "mixed", "uid-mixed", nodeOurs("a", "gpu-0000"), nodeOurs("b", "gpu-9999")))
	e := newNodeEnv(t, "", claims, nodeTable).start()

	req := []*drapbv1.Claim{
		nodeClaimRef(good),
		{Namespace: "ns", Name: "deleted", Uid: "uid-deleted"},
		{Namespace: "ns", Name: "replaced", Uid: "uid-old"},
		{Namespace: "ns", Name: "unallocated", Uid: "uid-unalloc"},
		{Namespace: "ns", Name: "foreign", Uid: "uid-foreign"},
		{Namespace: "ns", Name: "otherpool", Uid: "uid-otherpool"},
		{Namespace: "ns", Name: "unknown", Uid: "uid-unknown"},
		{Namespace: "ns", Name: "nocdi", Uid: "uid-nocdi"},
		{Namespace: "ns", Name: "mixed", Uid: "uid-mixed"},
	}
	want := map[string]string{
		"uid-deleted":   `claim ns/deleted (uid uid-deleted): deleted: the API server does not have it`,
		"uid-old":       `claim ns/replaced (uid uid-old): UID mismatch: the API server's claim of that name has UID uid-new (deleted and made again)`,
		"uid-unalloc":   `claim ns/unallocated (uid uid-unalloc): not allocated`,
		"uid-foreign":   `claim ns/foreign (uid uid-foreign): not allocated by gpu.featureplug.io: its allocation has devices of nic.example.com`,
		"uid-otherpool": `claim ns/otherpool (uid uid-otherpool): device "gpu-0000" (request "gpu"): allocated from pool "node-b", not from this node's pool "node-a"`,
		"uid-unknown":   `claim ns/unknown (uid uid-unknown): device "gpu-9999" (request "gpu"): unknown device: this node does not serve it through DRA now`,
		"uid-nocdi":     `claim ns/nocdi (uid uid-nocdi): device "gpu-nocdi" (request "gpu", resource example.com/a100): no CDI device IDs to give the container`,
		"uid-mixed":     `claim ns/mixed (uid uid-mixed): device "gpu-9999" (request "b"): unknown device: this node does not serve it through DRA now`,
	}
	got := e.prepare(e.v1(), req...)
	if len(got) != len(req) {
		t.Fatalf("%d answers for %d claims: %v", len(got), len(req), got)
	}
	if r := got["uid-good"]; r.GetError() != "" || len(r.GetDevices()) != 1 {
		t.Errorf("good claim: %v", r)
	}
	for uid, w := range want {
		r := got[uid]
		if r.GetError() != w {
			t.Errorf("%s: error\n %q, want\n %q", uid, r.GetError(), w)
		}
		if len(r.GetDevices()) != 0 {
			t.Errorf("%s: devices %v with an error", uid, r.GetDevices())
		}
	}
	if got := e.metric("featureplug_dra_prepare_total", "result", "error"); got != float64(len(want)) {
		t.Errorf("prepare_total{error} = %v, want %d", got, len(want))
	}
	if ck := e.checkpoint(); len(ck.Claims) != 1 || ck.Claims[0].UID != "uid-good" {
		t.Errorf("checkpoint = %+v, want only uid-good", ck)
	}

	// An API error other than NotFound is passed on, naming the claim.
	claims.mu.Lock()
	claims.err = apierrors.NewServiceUnavailable("etcd is down")
	claims.mu.Unlock()
	r := e.prepare(e.v1(), &drapbv1.Claim{Namespace: "ns", Name: "x", Uid: "uid-x"})["uid-x"]
	if w := "claim ns/x (uid uid-x): reading it from the API server: etcd is down"; r.GetError() != w {
		t.Errorf("API error: %q, want %q", r.GetError(), w)
	}
}

// TestNodeBadRequests: a request with too many claims, or a claim without
// uid, namespace or name, or a uid twice, is refused as a whole with
// InvalidArgument and a message saying what is wrong; nothing is read
// from the API server.
func TestNodeBadRequests(t *testing.T) {
	claims := &nodeClaims{}
	e := newNodeEnv(t, "", claims, nodeTable).start()
	c := e.v1()
	many := make([]*drapbv1.Claim, maxClaimsPerRequest+1)
	for i := range many {
		many[i] = &drapbv1.Claim{Namespace: "ns", Name: fmt.Sprintf("c%d", i), Uid: fmt.Sprintf("u%d", i)}
	}
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		name   string
		claims []*drapbv1.Claim
		want   string
	}{
		{"too many", many, "257 claims in one request, more than the 256 a request may have"},
		{"no uid", []*drapbv1.Claim{{Namespace: "ns", Name: "a"}}, `claims[0]: uid, namespace and name must be set (have "", "ns", "a")`},
		{"no name", []*drapbv1.Claim{{Namespace: "ns", Name: "a", Uid: "1"}, {Namespace: "ns", Uid: "2"}}, `claims[1]: uid, namespace and name must be set (have "2", "ns", "")`},
		{"long name", []*drapbv1.Claim{{Namespace: "ns", Name: long, Uid: "1"}}, "claims[0]: uid, namespace and name may have at most 253 bytes (have 1, 2, 300)"},
		{"uid twice", []*drapbv1.Claim{{Namespace: "ns", Name: "a", Uid: "1"}, {Namespace: "ns", Name: "b", Uid: "1"}}, `claims[1]: uid "1" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.NodePrepareResources(e.ctx(), &drapbv1.NodePrepareResourcesRequest{Claims: tc.claims})
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "NodePrepareResources: "+tc.want {
				t.Errorf("prepare: %v, want InvalidArgument %q", err, tc.want)
			}
			_, err = c.NodeUnprepareResources(e.ctx(), &drapbv1.NodeUnprepareResourcesRequest{Claims: tc.claims})
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "NodeUnprepareResources: "+tc.want {
				t.Errorf("unprepare: %v, want InvalidArgument %q", err, tc.want)
			}
		})
	}
	if claims.getCount() != 0 {
		t.Errorf("%d API reads for bad requests, want 0", claims.getCount())
	}
	// A request too big to decode is refused by gRPC before it is read.
	huge := make([]*drapbv1.Claim, 200)
	for i := range huge {
		huge[i] = &drapbv1.Claim{Namespace: "ns", Name: strings.Repeat("n", 6000), Uid: fmt.Sprint(i)}
	}
	if _, err := c.NodePrepareResources(e.ctx(), &drapbv1.NodePrepareResourcesRequest{Claims: huge}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 1.2 MB request: %v, want ResourceExhausted", err)
	}
}

// TestNodeRestartKeepsPreparedClaims: a new server on the same state
// directory answers a claim prepared by the old one from the checkpoint,
// with the same devices, without reading the API server and even though
// the device has left the table; unprepare then removes it for good.
func TestNodeRestartKeepsPreparedClaims(t *testing.T) {
	claims := &nodeClaims{}
	a := nodeClaim("ns", "a", "uid-a", nodeOurs("gpu", "gpu-0000"))
	claims.add(a)
	first := newNodeEnv(t, "", claims, nodeTable).start()
	want := nodeDevices(first.prepare(first.v1(), nodeClaimRef(a))["uid-a"])
	if len(want) != 1 {
		t.Fatalf("first prepare: %v", want)
	}
	first.stop()

	// The restarted agent has no devices yet and no API server.
	down := &nodeClaims{err: apierrors.NewServiceUnavailable("no API server")}
	second := newNodeEnv(t, first.stateDir, down, func() *Table { return nil }).start()
	if got := second.metric("featureplug_dra_prepared_claims", "", ""); got != 1 {
		t.Errorf("prepared_claims after restart = %v, want 1", got)
	}
	r := second.prepare(second.v1(), nodeClaimRef(a))["uid-a"]
	if r.GetError() != "" || !reflect.DeepEqual(nodeDevices(r), want) {
		t.Fatalf("prepare after restart = %v (error %q), want %v", nodeDevices(r), r.GetError(), want)
	}
	if down.getCount() != 0 {
		t.Errorf("%d API reads for a checkpointed claim, want 0", down.getCount())
	}
	if got := second.metric("featureplug_dra_prepare_total", "result", "checkpointed"); got != 1 {
		t.Errorf("prepare_total{checkpointed} = %v, want 1", got)
	}
	if un := second.unprepare(second.v1(), nodeClaimRef(a)); un["uid-a"].GetError() != "" {
		t.Fatalf("unprepare after restart: %v", un)
	}
	second.stop()
	third := newNodeEnv(t, first.stateDir, down, func() *Table { return nil })
	if got := third.metric("featureplug_dra_prepared_claims", "", ""); got != 0 {
		t.Errorf("prepared_claims after unprepare and restart = %v, want 0", got)
	}
}

// TestNodeConcurrentPrepare: the kubelet retrying a prepare while the
// first call runs prepares the claim once; every call gets the same
// devices.
func TestNodeConcurrentPrepare(t *testing.T) {
	claims := &nodeClaims{}
	a := nodeClaim("ns", "a", "uid-a", nodeOurs("gpu", "gpu-0000"))
	claims.add(a)
	e := newNodeEnv(t, "", claims, nodeTable).start()
	c := e.v1()
	const calls = 8
	results := make(chan *drapbv1.NodePrepareResourceResponse, calls)
	errs := make(chan error, calls)
	for range calls {
		go func() {
			resp, err := c.NodePrepareResources(e.ctx(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{nodeClaimRef(a)}})
			errs <- err
			results <- resp.GetClaims()["uid-a"]
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if r := <-results; r.GetError() != "" || len(r.GetDevices()) != 1 {
			t.Errorf("answer %v", r)
		}
	}
	if got := e.metric("featureplug_dra_prepare_total", "result", "prepared"); got != 1 {
		t.Errorf("prepare_total{prepared} = %v, want 1 (the others answered from the checkpoint)", got)
	}
	if got := e.metric("featureplug_dra_prepare_total", "result", "checkpointed"); got != calls-1 {
		t.Errorf("prepare_total{checkpointed} = %v, want %d", got, calls-1)
	}
}

// TestNodeCheckpointWriteFails: a claim whose checkpoint cannot be
// written is not prepared (a restart would forget it), and says why; a
// claim whose removal cannot be written stays prepared.
func TestNodeCheckpointWriteFails(t *testing.T) {
	claims := &nodeClaims{}
	a := nodeClaim("ns", "a", "uid-a", nodeOurs("gpu", "gpu-0000"))
	b := nodeClaim("ns", "b", "uid-b", nodeOurs("gpu", "mig-1111"))
	claims.add(a)
	claims.add(b)
	e := newNodeEnv(t, "", claims, nodeTable).start()
	c := e.v1()
	if r := e.prepare(c, nodeClaimRef(a))["uid-a"]; r.GetError() != "" {
		t.Fatal(r.GetError())
	}
	// The state directory becomes a file: writes fail.
	if err := os.RemoveAll(e.stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.stateDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.prepare(c, nodeClaimRef(b))["uid-b"]
	if !strings.HasPrefix(r.GetError(), "claim ns/b (uid uid-b): not prepared: its devices cannot be checkpointed: ") || len(r.GetDevices()) != 0 {
		t.Errorf("prepare with a broken state directory = %v", r)
	}
	un := e.unprepare(c, nodeClaimRef(a))["uid-a"]
	if !strings.HasPrefix(un.GetError(), "claim ns/a (uid uid-a): not unprepared: the checkpoint cannot be written: ") {
		t.Errorf("unprepare with a broken state directory = %v", un)
	}
	if got := e.metric("featureplug_dra_prepared_claims", "", ""); got != 1 {
		t.Errorf("prepared_claims = %v, want 1 (a still prepared, b not)", got)
	}
	if got := e.metric("featureplug_dra_checkpoint_writes_total", "result", "error"); got != 2 {
		t.Errorf("checkpoint_writes_total{error} = %v, want 2", got)
	}
	// Once the directory is back, both go through.
	if err := os.Remove(e.stateDir); err != nil {
		t.Fatal(err)
	}
	if r := e.prepare(c, nodeClaimRef(b))["uid-b"]; r.GetError() != "" {
		t.Errorf("prepare b: %s", r.GetError())
	}
	if un := e.unprepare(c, nodeClaimRef(a))["uid-a"]; un.GetError() != "" {
		t.Errorf("unprepare a: %s", un.GetError())
	}
	if ck := e.checkpoint(); len(ck.Claims) != 1 || ck.Claims[0].UID != "uid-b" {
		t.Errorf("checkpoint = %+v, want only uid-b", ck)
	}
}

// TestNodeSocketsComeBack: a deleted DRA socket, a deleted registration
// socket and a deleted plugin directory are made again, and serve.
func TestNodeSocketsComeBack(t *testing.T) {
	claims := &nodeClaims{}
	a := nodeClaim("ns", "a", "uid-a", nodeOurs("gpu", "gpu-0000"))
	claims.add(a)
	e := newNodeEnv(t, "", claims, nodeTable).start()

	for _, del := range []struct {
		what, socket, path string
	}{
		{"the DRA socket", "dra", e.n.PluginSocket()},
		{"the registration socket", "registration", e.n.RegistrationSocket()},
		{"the plugin directory", "dra", e.plugDir},
	} {
		before := e.metric("featureplug_dra_socket_starts_total", "socket", del.socket)
		// Moved away, then deleted: a recursive delete in place races the
		// socket made again in the directory.
		gone := del.path + ".gone"
		if err := os.Rename(del.path, gone); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(gone); err != nil {
			t.Fatal(err)
		}
		e.waitFor(del.what+" is made again", func() bool {
			return e.metric("featureplug_dra_socket_starts_total", "socket", del.socket) > before
		})
		// Each new socket serves (a new connection each time).
		if r := e.prepare(e.v1(), nodeClaimRef(a))["uid-a"]; r.GetError() != "" {
			t.Fatalf("after deleting %s: prepare: %s", del.what, r.GetError())
		}
		info, err := registerapi.NewRegistrationClient(e.dial(e.n.RegistrationSocket())).GetInfo(e.ctx(), &registerapi.InfoRequest{})
		if err != nil || info.GetName() != DriverName {
			t.Fatalf("after deleting %s: GetInfo = %v, %v", del.what, info, err)
		}
	}
	e.stop()
	for _, p := range []string{e.n.PluginSocket(), e.n.RegistrationSocket()} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after Run returned: %v", p, err)
		}
	}
}

// TestNodeCorruptCheckpoint: a checkpoint that cannot be parsed is
// logged naming the file, moved aside, and the server starts with no
// prepared claims.
func TestNodeCorruptCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name, content, why string
	}{
		{"not json", "{not json", "invalid character"},
		{"version", `{"version": 7, "claims": []}`, "version 7, want 1"},
		{"record", `{"version": 1, "claims": [{"uid": "u", "namespace": "ns", "name": "a", "devices": []}]}`, "claims[0]: claim ns/a (uid u): no devices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := kubeletsim.ShortTempDir(t)
			path := filepath.Join(state, CheckpointFile)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			e := newNodeEnv(t, state, &nodeClaims{}, nodeTable)
			logs := e.logs.String()
			if !strings.Contains(logs, "DRA checkpoint unusable") || !strings.Contains(logs, "corrupt checkpoint "+path) ||
				!strings.Contains(logs, tc.why) || !strings.Contains(logs, "moved aside to "+path+".corrupt") {
				t.Errorf("log does not name the file, the problem (%s) and where it went:\n%s", tc.why, logs)
			}
			aside, err := os.ReadFile(path + ".corrupt")
			if err != nil || string(aside) != tc.content {
				t.Errorf("moved-aside file = %q, %v; want the corrupt content", aside, err)
			}
			if ck := e.checkpoint(); ck.Version != 1 || len(ck.Claims) != 0 {
				t.Errorf("new checkpoint = %+v, want empty", ck)
			}
			if got := e.metric("featureplug_dra_prepared_claims", "", ""); got != 0 {
				t.Errorf("prepared_claims = %v, want 0", got)
			}
		})
	}
}

// BenchmarkNodePrepareUnprepare: one claim prepared and unprepared over
// the DRA socket, as the kubelet does per pod: an API read (a map here),
// two checkpoint writes (each with fsync) and two gRPC round trips.
func BenchmarkNodePrepareUnprepare(b *testing.B) {
	claims := &nodeClaims{}
	a := nodeClaim("ns", "a", "uid-a", nodeOurs("gpu", "gpu-0000"))
	claims.add(a)
	dir, err := os.MkdirTemp("", "fpdrab")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	n, err := NewNode(NodeOptions{
		NodeName: nodeTestNode, RegistryDir: filepath.Join(dir, "reg"), PluginDir: filepath.Join(dir, "plug"),
		StateDir: filepath.Join(dir, "state"), Claims: claims.in, Table: nodeTable,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	conn, err := grpc.NewClient("unix:"+n.PluginSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	c := drapbv1.NewDRAPluginClient(conn)
	req := []*drapbv1.Claim{nodeClaimRef(a)}
	// The socket is made by Run: the first call waits for it.
	wctx, wcancel := context.WithTimeout(ctx, nodeTestTimeout)
	defer wcancel()
	if _, err := c.NodeUnprepareResources(wctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: req}, grpc.WaitForReady(true)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		resp, err := c.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: req})
		if err != nil || resp.GetClaims()["uid-a"].GetError() != "" {
			b.Fatalf("prepare: %v %v", resp, err)
		}
		if _, err := c.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: req}); err != nil {
			b.Fatal(err)
		}
	}
}
