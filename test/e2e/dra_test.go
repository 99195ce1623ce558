package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/featureplug/featureplug/test/harness"
)

// DRA end to end: featureplug run as a DRA
// driver against the real kube-apiserver and kube-scheduler and the
// kubelet's own DRA manager (harness.KubeletDRA) and device manager
// (harness.KubeletPeer).

// This package cannot import plugin/dra or discovery/draattr: they link
// go-nvml, whose symbols the test binary (dynamically linked Go, as
// kustomize's plugin loader imports package plugin) would bind at start.
// These are their names as the DRA contract fixes them.
const (
	// draE2EDriver is featureplug's DRA driver (dra.DriverName), also the
	// domain of its attributes and capacities (draattr.Domain).
	draE2EDriver = "gpu.featureplug.io"
	// draE2EAttrResource is the attribute naming the resource the rules
	// gave a device (draattr.AttrResource).
	draE2EAttrResource = "resource"
)

// draE2ECheckpointFile is the agent's checkpoint of prepared claims in
// its state directory (dra.CheckpointFile).
const draE2ECheckpointFile = "dra-claims.json"

// draE2ESliceName is the name of a node's ResourceSlice (dra.SliceName).
func draE2ESliceName(node string) string { return node + "-" + draE2EDriver }

// draE2EDeviceName is a device's name in the slice (draattr.DeviceName):
// its UUID lowercased, which for the fake node's UUIDs is a DNS label.
func draE2EDeviceName(uuid string) string { return strings.ToLower(uuid) }

// draE2EFakeNode is the fake node of these tests (testdata/dra-a100.yaml):
// GPU 0 an A100-SXM4-80GB in MIG mode with two 3g.40gb devices, GPUs 1-3
// whole A100-SXM4-80GB, GPU 4 an A100-SXM4-40GB (40 GiB), GPU 5 an L40S
// (45 GiB).
const draE2EFakeNode = "testdata/dra-a100.yaml"

// Resource names the rules of these tests give.
const (
	draE2EA100  = "example.com/a100-80gb"
	draE2EOther = "example.com/gpu"
	draE2EMIG   = "example.com/mig-3g.40gb"
)

// draE2ECDIKind is the CDI vendor/class the agent is run with.
const draE2ECDIKind = "example.com/gpu"

// draE2ECDIAnnotationResource is the CDI spec's device annotation naming
// the resource (plugin/cdi.AnnotationResource; that package links
// nvidia-container-toolkit, which the test module does not).
const draE2ECDIAnnotationResource = "featureplug.io/resource"

// draE2ENamespace is where the tests' pods and claims live.
const draE2ENamespace = "default"

// draE2ERules gives GPUs 1-3 as example.com/a100-80gb (served as a100Serve
// says; "" leaves it to --serve), GPUs 4 and 5 as example.com/gpu and GPU
// 0's MIG devices as example.com/mig-3g.40gb (both left to --serve).
func draE2ERules(a100Serve string) string {
	serve := ""
	if a100Serve != "" {
		serve = "\n  serve: " + a100Serve
	}
	return `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: a100-80gb
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      product: {op: InRegexp, value: ["A100-SXM4-80GB"]}
  resource: ` + draE2EA100 + serve + `
- name: other-gpus
  devices: gpu
  resource: ` + draE2EOther + `
- name: mig-3g
  devices: mig
  matchFeatures:
  - feature: nvidia.mig
    matchExpressions:
      profile: {op: In, value: ["3g.40gb"]}
  resource: ` + draE2EMIG + `
`
}

// draE2ENode is one featureplug node of a DRA test: the kubelet's DRA
// side, the agent's directories, and the agent once started.
type draE2ENode struct {
	name      string
	api       *harness.APIServer
	kubelet   *harness.KubeletDRA
	rules     string // the rules file
	regDir    string // --kubelet-registry-dir
	pluginDir string // --dra-plugin-dir
	cdiDir    string // --cdi-spec-dir
	stateDir  string // --state-dir
	agent     *agent
}

// draE2EStartNode registers Node name as ready, starts the kubelet's DRA
// side for it and writes the rules file; the agent is not started yet.
func draE2EStartNode(t *testing.T, api *harness.APIServer, name, rules string) *draE2ENode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := api.CreateNode(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := harness.SetNodeReady(ctx, api, name); err != nil {
		t.Fatal(err)
	}
	dir := shortTempDir(t)
	n := &draE2ENode{
		name:      name,
		api:       api,
		rules:     filepath.Join(dir, "rules.yaml"),
		regDir:    filepath.Join(dir, "reg"),
		pluginDir: filepath.Join(dir, "dra"),
		cdiDir:    filepath.Join(dir, "cdi"),
		stateDir:  filepath.Join(dir, "state"),
	}
	for _, d := range []string{n.pluginDir, n.cdiDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(n.rules, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	n.kubelet = harness.StartKubeletDRA(t, api, name, n.regDir)
	return n
}

// draE2EStartAgent runs featureplug on the node with --serve serve and the
// DRA directories, the device-plugin directory kubeletDir ("" for none).
func (n *draE2ENode) draE2EStartAgent(t *testing.T, serve, kubeletDir string) {
	t.Helper()
	n.agent = startAgent(t, n.draE2EAgentSpec(serve, kubeletDir))
}

// draE2EAgentSpec is the agent draE2EStartAgent runs, as the cluster's
// admin.
func (n *draE2ENode) draE2EAgentSpec(serve, kubeletDir string) agentSpec {
	return agentSpec{
		Node:       n.name,
		FakeNode:   filepath.Join(build.root, "test", "e2e", draE2EFakeNode),
		Rules:      n.rules,
		Kubeconfig: n.api.KubeconfigPath,
		KubeletDir: kubeletDir,
		StateDir:   n.stateDir,
		Extra: []string{
			"--serve", serve,
			"--kubelet-registry-dir", n.regDir,
			"--dra-plugin-dir", n.pluginDir,
			"--cdi-spec-dir", n.cdiDir,
			"--cdi-kind", draE2ECDIKind,
			"--rediscover-interval", "1h",
		},
	}
}

// draE2EWaitRegistered waits until the agent's DRA driver is registered
// with the kubelet, as both sides see it.
func (n *draE2ENode) draE2EWaitRegistered(t *testing.T) {
	t.Helper()
	n.agent.waitMetric(t, "featureplug_dra_registered", func(v float64) bool { return v == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := n.kubelet.WaitRegistered(ctx, draE2EDriver); err != nil {
		t.Fatalf("the kubelet did not register featureplug's DRA driver: %v", err)
	}
}

// draE2EWaitSlice waits until the node's ResourceSlice holds exactly the
// wanted number of devices per resource (attribute draE2EAttrResource)
// and returns it.
func (n *draE2ENode) draE2EWaitSlice(t *testing.T, want map[string]int) *resourceapi.ResourceSlice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var s *resourceapi.ResourceSlice
	if err := waitFor(ctx, func() (bool, string) {
		var err error
		s, err = n.api.Client.ResourceV1().ResourceSlices().Get(ctx, draE2ESliceName(n.name), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := draE2ESliceResources(s)
		if len(got) != len(want) {
			return false, fmt.Sprintf("devices by resource %v", got)
		}
		for r, c := range want {
			if got[r] != c {
				return false, fmt.Sprintf("devices by resource %v", got)
			}
		}
		return true, ""
	}); err != nil {
		t.Fatalf("the ResourceSlice of node %s: %v; want devices by resource %v", n.name, err, want)
	}
	return s
}

// draE2ESliceResources counts a slice's devices by resource name.
func draE2ESliceResources(s *resourceapi.ResourceSlice) map[string]int {
	out := map[string]int{}
	for _, d := range s.Spec.Devices {
		if a, ok := d.Attributes[draE2EAttrResource]; ok && a.StringValue != nil {
			out[*a.StringValue]++
		}
	}
	return out
}

// draE2EDeviceUUIDs maps the device names a rule's resource has in the
// slice to their GPU or MIG UUIDs.
func draE2EDeviceUUIDs(t *testing.T, inv inventory, gpus []int, migOf int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range inv.GPUs {
		if slices.Contains(gpus, g.Index) {
			out[draE2EDeviceName(g.UUID)] = g.UUID
		}
		if g.Index == migOf {
			for _, m := range g.MIGDevices {
				out[draE2EDeviceName(m.UUID)] = m.UUID
			}
		}
	}
	return out
}

// draE2ECreateClasses creates the DeviceClasses `featureplug dra classes`
// prints for the rules file, as an admin installing the DRA option does;
// the API server must take each as it is.
func draE2ECreateClasses(t *testing.T, api *harness.APIServer, rules string) []resourceapi.DeviceClass {
	t.Helper()
	cmd := exec.Command(build.agent, "dra", "classes", "--rules", rules)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("featureplug dra classes --rules %s: %v: %s", rules, err, stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var classes []resourceapi.DeviceClass
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var c resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
			t.Fatalf("featureplug dra classes printed an object that is no DeviceClass: %v\n%s", err, doc)
		}
		if _, err := api.Client.ResourceV1().DeviceClasses().Create(ctx, &c, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server refused DeviceClass %s of featureplug dra classes: %v", c.Name, err)
		}
		classes = append(classes, c)
	}
	return classes
}

// draE2EPod is a pod of one container "main" that asks for n of the
// extended resource res, or (claim != "") for the ResourceClaim claim.
func draE2EPod(name, res string, n int64, claim string) *corev1.Pod {
	c := corev1.Container{Name: "main", Image: "registry.example/none"}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: draE2ENamespace}}
	if res != "" {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceName(res): q}
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): q}
	}
	if claim != "" {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}}
		c.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

// draE2EWaitPod waits until cond holds for the pod and returns it.
func draE2EWaitPod(t *testing.T, api *harness.APIServer, name string, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var p *corev1.Pod
	if err := waitFor(ctx, func() (bool, string) {
		var err error
		p, err = api.Client.CoreV1().Pods(draE2ENamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cond(p), fmt.Sprintf("node %q, conditions %+v, extended resource claim %+v",
			p.Spec.NodeName, p.Status.Conditions, p.Status.ExtendedResourceClaimStatus)
	}); err != nil {
		t.Fatalf("pod %s: waiting until %s: %v", name, what, err)
	}
	return p
}

// draE2EUnschedulable returns the pod's PodScheduled=False condition of
// reason Unschedulable, which kube-scheduler writes when no node fits, or
// nil.
func draE2EUnschedulable(p *corev1.Pod) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// draE2EAllocated returns the devices (by name) allocated to the claim
// from the node's pool of featureplug's driver, failing if anything else
// was allocated to it.
func draE2EAllocated(t *testing.T, api *harness.APIServer, node, claim string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting ResourceClaim %s: %v", claim, err)
	}
	if c.Status.Allocation == nil {
		t.Fatalf("ResourceClaim %s is not allocated", claim)
	}
	var names []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != draE2EDriver || r.Pool != node {
			t.Errorf("ResourceClaim %s: device %s allocated from driver %s pool %s, want driver %s pool %s", claim, r.Device, r.Driver, r.Pool, draE2EDriver, node)
		}
		names = append(names, r.Device)
	}
	return names
}

// draE2ECheckCDI checks that the CDI IDs a container got are exactly those
// of the devices (UUIDs) and resolve through the CDI spec the agent wrote
// in specDir, as a container runtime would resolve them, with the
// resource annotation of the spec naming res.
func draE2ECheckCDI(t *testing.T, specDir string, ids []string, uuids []string, res string) {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(specDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("CDI cache over %s: %v", specDir, err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI specs in %s do not load: %v", specDir, errs)
	}
	var names []string
	for _, id := range ids {
		vendor, class, name, err := cdiparser.ParseQualifiedName(id)
		if err != nil {
			t.Errorf("CDI ID %q: %v", id, err)
			continue
		}
		names = append(names, name)
		d := cache.GetDevice(id)
		if d == nil {
			t.Errorf("CDI ID %s does not resolve through the specs in %s (devices %v)", id, specDir, cache.ListDevices())
			continue
		}
		if kind := vendor + "/" + class; kind != draE2ECDIKind {
			t.Errorf("CDI ID %s has kind %s, want %s", id, kind, draE2ECDIKind)
		}
		if len(d.ContainerEdits.DeviceNodes) == 0 {
			t.Errorf("CDI device %s gives the container no device node", id)
		}
		if got := d.Annotations[draE2ECDIAnnotationResource]; got != res {
			t.Errorf("CDI device %s is annotated with resource %q, want %q", id, got, res)
		}
	}
	slices.Sort(names)
	want := slices.Sorted(slices.Values(uuids))
	if !slices.Equal(names, want) {
		t.Errorf("CDI IDs %v name devices %v, want the allocated devices %v", ids, names, want)
	}
}

// draE2EEnsureServiceAccount creates the namespace's default service
// account, which the ServiceAccount admission plugin wants for a pod and
// which no controller makes here.
func draE2EEnsureServiceAccount(t *testing.T, api *harness.APIServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := api.Client.CoreV1().ServiceAccounts(draE2ENamespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the default service account: %v", err)
	}
}

// draE2EAnyClass is a DeviceClass of every device of featureplug's
// driver, for claims that select by their own CEL expressions.
const draE2EAnyClass = "any.gpu.featureplug.io"

// draE2ECreateAnyClass creates draE2EAnyClass: every device of
// featureplug's driver, for claims that select by their own CEL.
func draE2ECreateAnyClass(t *testing.T, api *harness.APIServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: draE2EAnyClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", draE2EDriver)}}}},
	}
	if _, err := api.Client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// draE2EAttr and draE2ECap are CEL for one of featureplug's attributes
// and capacities.
func draE2EAttr(name string) string {
	return fmt.Sprintf("device.attributes[%q].%s", draE2EDriver, name)
}

func draE2ECap(name string) string {
	return fmt.Sprintf("device.capacity[%q].%s", draE2EDriver, name)
}

// draE2EClaim is a ResourceClaim for one device of draE2EAnyClass that
// the CEL expression selects.
func draE2EClaim(name, cel string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: draE2ENamespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: draE2EAnyClass,
				Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}},
			},
		}}}},
	}
}

// TestDRAEndToEnd runs featureplug with --serve dra on a fake node of six
// GPUs next to a ready node without featureplug, with the DeviceClasses
// `featureplug dra classes` makes of the rules, the real kube-scheduler and
// the kubelet's DRA manager: a pod asking for the extended resource
// example.com/a100-80gb is placed on featureplug's node, its claim
// allocated from featureplug's slice, and prepared as the CDI ID of one of
// the GPUs the rule named, which resolves through the agent's CDI spec; a
// claim with a CEL selector on product and memory gets the one matching
// device, one no device matches stays unallocated with its pod
// unschedulable; an agent restart keeps the prepared claims and the slice
// as they were, writing nothing; an XID on a prepared GPU turns its health
// in the pod's container status (as the kubelet's DRA manager fills it
// from featureplug's DRAResourceHealth stream) from Healthy to Unhealthy
// with the message xid-79.
func TestDRAEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler and featureplug")
	}
	api := harness.StartAPIServer(t)
	draE2EEnsureServiceAccount(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// A ready node with no featureplug: the scheduler must not place
	// pods asking for featureplug's resources there.
	if _, err := api.CreateNode(ctx, "dra-bare"); err != nil {
		t.Fatal(err)
	}
	if err := harness.SetNodeReady(ctx, api, "dra-bare"); err != nil {
		t.Fatal(err)
	}
	n := draE2EStartNode(t, api, "dra-gpus", draE2ERules(""))
	n.draE2EStartAgent(t, "dra", "")
	n.draE2EWaitRegistered(t)

	inv := discover(t, filepath.Join(build.root, "test", "e2e", draE2EFakeNode))
	a100 := draE2EDeviceUUIDs(t, inv, []int{1, 2, 3}, -1)
	others := draE2EDeviceUUIDs(t, inv, []int{4, 5}, -1)
	migs := draE2EDeviceUUIDs(t, inv, nil, 0)
	slice := n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})
	for _, d := range slice.Spec.Devices {
		res := *d.Attributes[draE2EAttrResource].StringValue
		byRes := map[string]map[string]string{draE2EA100: a100, draE2EOther: others, draE2EMIG: migs}[res]
		if _, ok := byRes[d.Name]; !ok {
			t.Errorf("slice device %s (resource %s) is none of the devices the rules give %s: %v", d.Name, res, res, byRes)
		}
	}

	classes := draE2ECreateClasses(t, api, n.rules)
	ext := map[string]bool{}
	for _, c := range classes {
		if c.Spec.ExtendedResourceName != nil {
			ext[*c.Spec.ExtendedResourceName] = true
		}
	}
	for _, r := range []string{draE2EA100, draE2EOther, draE2EMIG} {
		if !ext[r] {
			t.Errorf("featureplug dra classes made no DeviceClass with extendedResourceName %s (classes %v)", r, ext)
		}
	}
	draE2ECreateAnyClass(t, api)
	harness.StartScheduler(t, api)
	pods := api.Client.CoreV1().Pods(draE2ENamespace)

	t.Run("ExtendedResourcePodGetsRulesDevice", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if _, err := pods.Create(ctx, draE2EPod("ext-a100", draE2EA100, 1, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := draE2EWaitPod(t, api, "ext-a100", "bound with the claim the scheduler made", func(p *corev1.Pod) bool {
			return p.Spec.NodeName != "" && p.Status.ExtendedResourceClaimStatus != nil
		})
		if p.Spec.NodeName != n.name {
			t.Fatalf("pod asking for %s placed on node %s, want %s (the node whose featureplug serves it)", draE2EA100, p.Spec.NodeName, n.name)
		}
		devs := draE2EAllocated(t, api, n.name, p.Status.ExtendedResourceClaimStatus.ResourceClaimName)
		if len(devs) != 1 || a100[devs[0]] == "" {
			t.Fatalf("claim for %s got devices %v, want one of the rule's GPUs %v", draE2EA100, devs, a100)
		}
		ids, err := n.kubelet.PreparePod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		draE2ECheckCDI(t, n.cdiDir, ids["main"], []string{a100[devs[0]]}, draE2EA100)
		if v := n.agent.metric(t, "featureplug_dra_prepare_total", `result="prepared"`); v != 1 {
			t.Errorf("featureplug_dra_prepare_total{result=prepared} = %v, want 1", v)
		}
	})

	t.Run("ClaimSelectsMemoryAndProduct", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		// An A100 with less than 64 GiB: GPU 4 alone (the L40S has less
		// memory but is no A100; GPUs 1-3 are A100s with 80 GiB).
		cel := draE2EAttr("type") + ` == "gpu" && ` + draE2EAttr("product") + `.matches("A100") && ` +
			draE2ECap("memory") + `.compareTo(quantity("64Gi")) < 0`
		if _, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Create(ctx, draE2EClaim("a100-small", cel), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a claim selecting %s: %v", cel, err)
		}
		if _, err := pods.Create(ctx, draE2EPod("cel-a100", "", 0, "a100-small"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := draE2EWaitPod(t, api, "cel-a100", "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
		if p.Spec.NodeName != n.name {
			t.Fatalf("pod placed on node %s, want %s", p.Spec.NodeName, n.name)
		}
		gpu4 := inv.GPUs[4].UUID
		devs := draE2EAllocated(t, api, n.name, "a100-small")
		if want := []string{draE2EDeviceName(gpu4)}; !slices.Equal(devs, want) {
			t.Fatalf("claim selecting %s got devices %v, want %v (GPU 4)", cel, devs, want)
		}
		ids, err := n.kubelet.PreparePod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		draE2ECheckCDI(t, n.cdiDir, ids["main"], []string{gpu4}, draE2EOther)
	})

	t.Run("ImpossibleClaimStaysUnallocated", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		cel := draE2EAttr("type") + ` == "gpu" && ` + draE2ECap("memory") + `.compareTo(quantity("1Ti")) >= 0`
		if _, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Create(ctx, draE2EClaim("a100-huge", cel), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a claim selecting %s: %v", cel, err)
		}
		if _, err := pods.Create(ctx, draE2EPod("cel-huge", "", 0, "a100-huge"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The scheduler's verdict is the positive marker: it tried every
		// node and found none.
		p := draE2EWaitPod(t, api, "cel-huge", "unschedulable", func(p *corev1.Pod) bool { return draE2EUnschedulable(p) != nil })
		if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
			t.Errorf("pod bound to %q in phase %s, want Pending on no node", p.Spec.NodeName, p.Status.Phase)
		}
		t.Logf("scheduler: %s", draE2EUnschedulable(p).Message)
		c, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Get(ctx, "a100-huge", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation != nil {
			t.Errorf("claim selecting %s was allocated %+v", cel, c.Status.Allocation)
		}
	})

	t.Run("AgentRestartKeepsPreparedClaims", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if _, err := pods.Create(ctx, draE2EPod("ext-mig", draE2EMIG, 1, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := draE2EWaitPod(t, api, "ext-mig", "bound with the claim the scheduler made", func(p *corev1.Pod) bool {
			return p.Spec.NodeName != "" && p.Status.ExtendedResourceClaimStatus != nil
		})
		devs := draE2EAllocated(t, api, n.name, p.Status.ExtendedResourceClaimStatus.ResourceClaimName)
		if len(devs) != 1 || migs[devs[0]] == "" {
			t.Fatalf("claim for %s got devices %v, want one of GPU 0's MIG devices %v", draE2EMIG, devs, migs)
		}
		ids, err := n.kubelet.PreparePod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		draE2ECheckCDI(t, n.cdiDir, ids["main"], []string{migs[devs[0]]}, draE2EMIG)
		prepared := n.agent.metric(t, "featureplug_dra_prepared_claims")
		if prepared < 1 {
			t.Fatalf("featureplug_dra_prepared_claims = %v with a prepared claim", prepared)
		}
		claimUID := draE2EClaimUID(t, api, p.Status.ExtendedResourceClaimStatus.ResourceClaimName)
		ckpt := filepath.Join(n.stateDir, draE2ECheckpointFile)
		if b, err := os.ReadFile(ckpt); err != nil || !bytes.Contains(b, []byte(claimUID)) {
			t.Errorf("checkpoint %s does not hold the prepared claim %s (err %v)", ckpt, claimUID, err)
		}
		before, err := api.Client.ResourceV1().ResourceSlices().Get(ctx, draE2ESliceName(n.name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		n.agent.restart(t)
		// The new process compared its slice with the API server's (the
		// positive marker) and registered again with the kubelet.
		n.agent.waitMetric(t, "featureplug_dra_slice_syncs_total", func(v float64) bool { return v >= 1 }, `result="ok"`)
		n.draE2EWaitRegistered(t)
		if w := n.agent.metric(t, "featureplug_dra_slice_writes_total"); w != 0 {
			t.Errorf("the restarted agent wrote the unchanged slice %v times", w)
		}
		after, err := api.Client.ResourceV1().ResourceSlices().Get(ctx, draE2ESliceName(n.name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.UID != before.UID || after.ResourceVersion != before.ResourceVersion {
			t.Errorf("slice UID %s -> %s, resourceVersion %s -> %s across the restart; want it untouched",
				before.UID, after.UID, before.ResourceVersion, after.ResourceVersion)
		}
		if got := n.agent.metric(t, "featureplug_dra_prepared_claims"); got != prepared {
			t.Errorf("featureplug_dra_prepared_claims = %v after the restart, want %v (from the checkpoint)", got, prepared)
		}

		// A kubelet that lost its own state prepares the claim again: the
		// restarted agent answers from its checkpoint, with the same CDI
		// IDs, and prepares nothing twice. (The new kubelet deletes the
		// node's slice at start; the agent writes it again.)
		n.kubelet.Stop()
		n.kubelet = harness.StartKubeletDRA(t, api, n.name, n.regDir)
		n.draE2EWaitRegistered(t)
		again, err := n.kubelet.PreparePod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(again["main"], ids["main"]) {
			t.Errorf("prepared again after the restart: CDI IDs %v, want %v as before", again["main"], ids["main"])
		}
		if v := n.agent.metric(t, "featureplug_dra_prepare_total", `result="checkpointed"`); v != 1 {
			t.Errorf("featureplug_dra_prepare_total{result=checkpointed} = %v, want 1", v)
		}
		if v := n.agent.metric(t, "featureplug_dra_prepare_total", `result="prepared"`); v != 0 {
			t.Errorf("featureplug_dra_prepare_total{result=prepared} = %v in the restarted agent, want 0", v)
		}
		if got := n.agent.metric(t, "featureplug_dra_prepared_claims"); got != prepared {
			t.Errorf("featureplug_dra_prepared_claims = %v after preparing again, want %v", got, prepared)
		}
		n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})

		// The restarted agent knows the claim it prepared before: the
		// kubelet's unprepare finds it.
		if err := n.kubelet.UnpreparePod(ctx, p); err != nil {
			t.Fatal(err)
		}
		if v := n.agent.metric(t, "featureplug_dra_unprepare_total", `result="unprepared"`); v != 1 {
			t.Errorf("featureplug_dra_unprepare_total{result=unprepared} = %v, want 1", v)
		}
		if v := n.agent.metric(t, "featureplug_dra_unprepare_total", `result="unknown"`); v != 0 {
			t.Errorf("featureplug_dra_unprepare_total{result=unknown} = %v, want 0: the restart lost the claim", v)
		}
		if got := n.agent.metric(t, "featureplug_dra_prepared_claims"); got != prepared-1 {
			t.Errorf("featureplug_dra_prepared_claims = %v after unprepare, want %v", got, prepared-1)
		}
	})

	// Last, and on GPU 5, which no other subtest uses: the XID it plays
	// leaves GPU 5 unhealthy (and its slice device tainted) for good.
	t.Run("DeviceHealthReachesPodStatus", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		// A kubelet of this subtest's own (one a subtest before started
		// ended with it): its plugin manager opens the device health
		// stream when the driver registers. It deletes the node's slice
		// at start; the agent writes it again.
		n.kubelet.Stop()
		n.kubelet = harness.StartKubeletDRA(t, api, n.name, n.regDir)
		n.draE2EWaitRegistered(t)
		n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})
		cel := draE2EAttr("type") + ` == "gpu" && ` + draE2EAttr("product") + `.matches("L40S")`
		if _, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Create(ctx, draE2EClaim("l40s", cel), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a claim selecting %s: %v", cel, err)
		}
		if _, err := pods.Create(ctx, draE2EPod("health-l40s", "", 0, "l40s"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := draE2EWaitPod(t, api, "health-l40s", "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
		gpu5 := inv.GPUs[5]
		if gpu5.Index != 5 {
			t.Fatalf("inventory GPU 5 has index %d", gpu5.Index)
		}
		devs := draE2EAllocated(t, api, n.name, "l40s")
		if want := []string{draE2EDeviceName(gpu5.UUID)}; !slices.Equal(devs, want) {
			t.Fatalf("claim selecting %s got devices %v, want %v (GPU 5)", cel, devs, want)
		}
		ids, err := n.kubelet.PreparePod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		draE2ECheckCDI(t, n.cdiDir, ids["main"], []string{gpu5.UUID}, draE2EOther)
		if len(ids["main"]) != 1 {
			t.Fatalf("container main got CDI IDs %v, want one", ids["main"])
		}
		// The kubelet reports a device by its first CDI ID.
		cdiID := ids["main"][0]
		draE2EWaitDeviceHealth(t, n.kubelet, p, cdiID, corev1.ResourceHealthStatusHealthy, "")

		n.agent.injectXID(t, 5, 79)
		draE2EWaitDeviceHealth(t, n.kubelet, p, cdiID, corev1.ResourceHealthStatusUnhealthy, "xid-79")
	})
}

// TestDRARulesEditMovesResourceFromDevicePlugin runs featureplug with the
// device plugins as the default API, next to the kubelet's device manager
// and DRA manager: a rules edit that says serve: dra for one resource
// withdraws it from the device manager and publishes exactly its devices
// in the slice, while the device plugins of the other resources keep
// their registration and devices; a pod asking for the moved resource is
// then served through DRA.
func TestDRARulesEditMovesResourceFromDevicePlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler and featureplug")
	}
	api := harness.StartAPIServer(t)
	draE2EEnsureServiceAccount(t, api)
	n := draE2EStartNode(t, api, "dra-switch", draE2ERules(""))
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	n.draE2EStartAgent(t, "device-plugin", kubeletDir)
	waitCapacities(t, peer, map[string]int64{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})
	regs := map[string]float64{}
	for _, r := range []string{draE2EOther, draE2EMIG} {
		// The kubelet may list the devices a moment before the agent
		// counts the registration that led there.
		regs[r] = n.agent.waitMetric(t, "featureplug_plugin_registrations_total", func(v float64) bool { return v >= 1 },
			`resource="`+r+`"`, `result="ok"`)
	}

	writeFileAtomic(t, n.rules, []byte(draE2ERules("dra")))
	inv := discover(t, filepath.Join(build.root, "test", "e2e", draE2EFakeNode))
	a100 := draE2EDeviceUUIDs(t, inv, []int{1, 2, 3}, -1)
	slice := n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3})
	for _, d := range slice.Spec.Devices {
		if a100[d.Name] == "" {
			t.Errorf("slice device %s is none of the GPUs of %s %v", d.Name, draE2EA100, a100)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// Withdrawn from the device manager: its plugin is gone, so the
	// kubelet holds none of its devices allocatable.
	if err := waitFor(ctx, func() (bool, string) {
		c, a := peer.Capacity(draE2EA100)
		return a == 0, fmt.Sprintf("%s capacity %d allocatable %d", draE2EA100, c, a)
	}); err != nil {
		t.Fatalf("%s still served by the device plugin after it moved to DRA: %v", draE2EA100, err)
	}
	if v := n.agent.metric(t, "featureplug_plugin_devices", `resource="`+draE2EA100+`"`); v != 0 {
		t.Errorf("featureplug_plugin_devices{resource=%s} = %v after it moved to DRA, want 0", draE2EA100, v)
	}
	// The other resources' device plugins were left alone: same devices,
	// no new registration (a new stream would register again).
	for r, c := range map[string]int64{draE2EOther: 2, draE2EMIG: 2} {
		if gc, ga := peer.Capacity(r); gc != c || ga != c {
			t.Errorf("%s capacity %d allocatable %d after the edit, want %d, %d", r, gc, ga, c, c)
		}
		if v := n.agent.metric(t, "featureplug_plugin_registrations_total", `resource="`+r+`"`, `result="ok"`); v != regs[r] {
			t.Errorf("%s registered with the kubelet %v times before the edit and %v after; want its stream untouched", r, regs[r], v)
		}
	}

	// Served through DRA now.
	n.draE2EWaitRegistered(t)
	draE2ECreateClasses(t, api, n.rules)
	harness.StartScheduler(t, api)
	if _, err := api.Client.CoreV1().Pods(draE2ENamespace).Create(ctx, draE2EPod("moved-a100", draE2EA100, 1, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := draE2EWaitPod(t, api, "moved-a100", "bound with the claim the scheduler made", func(p *corev1.Pod) bool {
		return p.Spec.NodeName != "" && p.Status.ExtendedResourceClaimStatus != nil
	})
	devs := draE2EAllocated(t, api, n.name, p.Status.ExtendedResourceClaimStatus.ResourceClaimName)
	if len(devs) != 1 || a100[devs[0]] == "" {
		t.Fatalf("claim for %s got devices %v, want one of %v", draE2EA100, devs, a100)
	}
	ids, err := n.kubelet.PreparePod(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	draE2ECheckCDI(t, n.cdiDir, ids["main"], []string{a100[devs[0]]}, draE2EA100)
}

// draE2EClaimUID returns the UID of a ResourceClaim.
func draE2EClaimUID(t *testing.T, api *harness.APIServer, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting ResourceClaim %s: %v", name, err)
	}
	return string(c.UID)
}
