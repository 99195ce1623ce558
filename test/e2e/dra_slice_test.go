package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// TestDRASlice checks featureplug's ResourceSlices against the real
// kube-apiserver (Kubernetes 1.37, its default feature gates): the slices
// the agent makes for whole GPUs, MIG devices, time-sliced and unhealthy
// devices are valid and stored without a field dropped; the agent
// publishes one slice per node, owned by the Node, and writes nothing when
// it restarts to the same devices; a rules edit that moves a resource to
// DRA publishes exactly its devices.
func TestDRASlice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and featureplug")
	}
	api := harness.StartAPIServer(t)
	t.Run("ValidWithSharingAndTaints", func(t *testing.T) { draSliceValid(t, api) })
	t.Run("CreatedOnceNoWriteOnRestart", func(t *testing.T) { draSliceNoWriteOnRestart(t, api) })
	t.Run("RulesEditMovesResourceToDRA", func(t *testing.T) { draSliceRulesEdit(t, api) })
}

// draSliceName is the name of a node's ResourceSlice (dra.SliceName;
// this package cannot import plugin/dra: it links go-nvml, whose symbols a
// race-enabled test binary binds at start).
func draSliceName(node string) string { return node + "-" + draSliceDriver }

// draSliceDriver is featureplug's DRA driver (dra.DriverName).
const draSliceDriver = "gpu.featureplug.io"

// draSliceMixedRules time-slice dgx-a100's whole GPUs four ways and its
// one-slice MIG devices two ways, and make each other MIG profile a
// resource.
const draSliceMixedRules = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu
  sharing:
    strategy: time-slicing
    replicas: 4
- name: mig-small-shared
  devices: mig
  matchFeatures:
  - feature: nvidia.mig
    matchExpressions:
      slices.gi: {op: In, value: ["1"]}
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "." }}.shared'
  sharing:
    strategy: time-slicing
    replicas: 2
- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "." }}'
`

// draSliceValid: with --serve dra, rules on the bundled dgx-a100 serve
// time-sliced whole GPUs, time-sliced MIG devices and MIG devices through
// DRA; the API server
// takes the slice (no sync error) and stores it whole (sharing and
// taints not dropped by a feature gate); an XID taints the GPU's devices.
func draSliceValid(t *testing.T, api *harness.APIServer) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := api.CreateNode(ctx, "dra-valid")
	if err != nil {
		t.Fatal(err)
	}
	inv := discover(t, "dgx-a100")
	want := map[string]int{}
	gpuDevices := map[string]bool{} // GPU 0's device names
	for _, g := range inv.GPUs {
		if !g.MIGEnabled {
			want["nvidia.com/gpu"]++
			if g.Index == 0 {
				gpuDevices[strings.ToLower(g.UUID)] = true
			}
		}
		for _, m := range g.MIGDevices {
			name := "nvidia.com/mig-" + strings.ReplaceAll(m.Profile, "+", ".")
			if strings.HasPrefix(m.Profile, "1g.") {
				name += ".shared"
			}
			want[name]++
			if g.Index == 0 {
				gpuDevices[strings.ToLower(m.UUID)] = true
			}
		}
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(draSliceMixedRules), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, agentSpec{
		Node: n.Name, FakeNode: "dgx-a100", Kubeconfig: api.KubeconfigPath, Rules: rules,
		Extra: []string{
			"--serve", "dra",
			"--cdi-spec-dir", filepath.Join(shortTempDir(t), "cdi"),
			"--kubelet-registry-dir", shortTempDir(t),
			"--dra-plugin-dir", shortTempDir(t),
			"--rediscover-interval", "1h",
		},
	})
	s := draSliceWait(t, api, n.Name, want)
	if e := a.metric(t, "featureplug_dra_slice_syncs_total", `result="error"`); e != 0 {
		t.Errorf("%v syncs failed: the API server refused a slice", e)
	}
	shared := 0
	for _, d := range s.Spec.Devices {
		res := *d.Attributes["resource"].StringValue
		multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
		replicas := map[bool]int64{true: 4, false: 2}[res == "nvidia.com/gpu"]
		if res == "nvidia.com/gpu" || strings.HasSuffix(res, ".shared") {
			shared++
			c, ok := d.Capacity["shares"]
			if !multi || !ok || c.Value.Value() != replicas || c.RequestPolicy == nil || c.RequestPolicy.Default == nil || c.RequestPolicy.Default.Value() != 1 {
				t.Errorf("%s (%s): stored without its sharing (allowMultipleAllocations %v, shares %+v)", d.Name, res, d.AllowMultipleAllocations, c)
			}
			if m := d.Capacity["memory"]; m.RequestPolicy == nil || m.RequestPolicy.Default == nil || !m.RequestPolicy.Default.IsZero() {
				t.Errorf("%s (%s): memory %+v, want a request policy consuming none by default", d.Name, res, m)
			}
			continue
		}
		// Unshared: memory (and a MIG device's multiprocessors and
		// engine counts) as plain capacities, no shares.
		_, shares := d.Capacity["shares"]
		_, memory := d.Capacity["memory"]
		if multi || shares || !memory {
			t.Errorf("%s (%s): unshared device with allowMultipleAllocations %v, capacity %+v", d.Name, res, d.AllowMultipleAllocations, d.Capacity)
		}
		for name, c := range d.Capacity {
			if c.RequestPolicy != nil {
				t.Errorf("%s (%s): capacity %s of an unshared device has a request policy %+v", d.Name, res, name, c.RequestPolicy)
			}
		}
	}
	if shared == 0 {
		t.Fatal("no time-sliced device in the slice")
	}

	a.injectXID(t, 0, 79)
	err = waitFor(ctx, func() (bool, string) {
		s, err := api.Client.ResourceV1().ResourceSlices().Get(ctx, draSliceName(n.Name), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range s.Spec.Devices {
			tainted := len(d.Taints) == 1 && d.Taints[0].Key == "gpu.featureplug.io/unhealthy" && d.Taints[0].Value == "xid-79" &&
				d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoSchedule && d.Taints[0].TimeAdded != nil
			if tainted != gpuDevices[d.Name] {
				return false, fmt.Sprintf("device %s taints %+v (of GPU 0: %v)", d.Name, d.Taints, gpuDevices[d.Name])
			}
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("after XID 79 on GPU 0: %v", err)
	}
}

// draSliceRules serves GPUs 0-3 of dgx-h100 as example.com/a (through
// aServe) and the others as example.com/b through the device plugin.
func draSliceRules(aServe string) string {
	return fmt.Sprintf(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: a
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {index: {op: In, value: ["0", "1", "2", "3"]}}}]
  resource: example.com/a
  serve: %s
- name: b
  devices: gpu
  resource: example.com/b
  serve: device-plugin
`, aServe)
}

// draSliceAgent runs an agent of node on dgx-h100 with the rules file
// path and the DRA directories.
func draSliceAgent(t *testing.T, api *harness.APIServer, node, rules string) *agent {
	t.Helper()
	return startAgent(t, agentSpec{
		Node: node, FakeNode: "dgx-h100", Rules: rules, Kubeconfig: api.KubeconfigPath,
		Extra: []string{
			"--cdi-spec-dir", filepath.Join(shortTempDir(t), "cdi"),
			"--kubelet-registry-dir", shortTempDir(t),
			"--dra-plugin-dir", shortTempDir(t),
			"--rediscover-interval", "1h",
		},
	})
}

// draSliceWait waits until the node's slice holds the devices of the
// given resources (by the attribute "resource") and returns it.
func draSliceWait(t *testing.T, api *harness.APIServer, node string, want map[string]int) *resourceapi.ResourceSlice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var s *resourceapi.ResourceSlice
	err := waitFor(ctx, func() (bool, string) {
		var err error
		s, err = api.Client.ResourceV1().ResourceSlices().Get(ctx, draSliceName(node), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := draSliceResources(s)
		if len(got) != len(want) {
			return false, fmt.Sprintf("devices by resource %v", got)
		}
		for k, v := range want {
			if got[k] != v {
				return false, fmt.Sprintf("devices by resource %v", got)
			}
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("the ResourceSlice of node %s: %v; want devices by resource %v", node, err, want)
	}
	return s
}

// draSliceResources counts a slice's devices by resource name.
func draSliceResources(s *resourceapi.ResourceSlice) map[string]int {
	out := map[string]int{}
	for _, d := range s.Spec.Devices {
		if a, ok := d.Attributes["resource"]; ok && a.StringValue != nil {
			out[*a.StringValue]++
		}
	}
	return out
}

func draSliceNoWriteOnRestart(t *testing.T, api *harness.APIServer) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := api.CreateNode(ctx, "dra-restart")
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(draSliceRules("dra")), 0o644); err != nil {
		t.Fatal(err)
	}
	a := draSliceAgent(t, api, n.Name, rules)
	s := draSliceWait(t, api, n.Name, map[string]int{"example.com/a": 4})
	a.waitMetric(t, "featureplug_dra_slice_writes_total", func(v float64) bool { return v == 1 }, `op="create"`)

	// One slice of the node, named after it, owned by the Node, its pool
	// the node.
	list, err := api.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d slices of node %s, want 1", len(list.Items), n.Name)
	}
	if s.Spec.Pool.Name != n.Name || s.Spec.Pool.ResourceSliceCount != 1 || s.Spec.Driver != draSliceDriver {
		t.Errorf("pool %+v driver %s, want pool %s of one slice, driver %s", s.Spec.Pool, s.Spec.Driver, n.Name, draSliceDriver)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].UID != n.UID {
		t.Errorf("owner references %+v, want the Node %s (%s)", s.OwnerReferences, n.Name, n.UID)
	}
	var names []string
	for _, d := range s.Spec.Devices {
		names = append(names, d.Name)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("devices %v are not sorted by name", names)
	}

	// A restart re-publishes the same slice: compared, not written.
	a.restart(t)
	a.waitMetric(t, "featureplug_dra_slice_syncs_total", func(v float64) bool { return v >= 1 }, `result="ok"`)
	if w := a.metric(t, "featureplug_dra_slice_writes_total"); w != 0 {
		t.Errorf("the restarted agent wrote the unchanged slice %v times", w)
	}
	after, err := api.Client.ResourceV1().ResourceSlices().Get(ctx, draSliceName(n.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != s.ResourceVersion || after.UID != s.UID {
		t.Errorf("slice resourceVersion %s -> %s, UID %s -> %s after a restart; want it untouched", s.ResourceVersion, after.ResourceVersion, s.UID, after.UID)
	}
}

func draSliceRulesEdit(t *testing.T, api *harness.APIServer) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := api.CreateNode(ctx, "dra-edit")
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(draSliceRules("device-plugin")), 0o644); err != nil {
		t.Fatal(err)
	}
	a := draSliceAgent(t, api, n.Name, rules)
	// The plan is applied (the device plugin of example.com/b serves its
	// four GPUs): nothing is served through DRA, so there is no slice.
	a.waitMetric(t, "featureplug_plugin_devices", func(v float64) bool { return v == 4 }, `resource="example.com/b"`)
	if _, err := api.Client.ResourceV1().ResourceSlices().Get(ctx, draSliceName(n.Name), metav1.GetOptions{}); err == nil {
		t.Fatalf("a ResourceSlice for node %s while no resource is served through DRA", n.Name)
	}

	writeFileAtomic(t, rules, []byte(draSliceRules("dra")))
	s := draSliceWait(t, api, n.Name, map[string]int{"example.com/a": 4})
	if got := draSliceResources(s); got["example.com/b"] != 0 {
		t.Errorf("example.com/b (device plugin) is in the slice: %v", got)
	}
	a.waitMetric(t, "featureplug_dra_devices", func(v float64) bool { return v == 4 })

	// And back: the slice goes.
	writeFileAtomic(t, rules, []byte(draSliceRules("device-plugin")))
	a.waitMetric(t, "featureplug_dra_slice_writes_total", func(v float64) bool { return v == 1 }, `op="delete"`)
	if _, err := api.Client.ResourceV1().ResourceSlices().Get(ctx, draSliceName(n.Name), metav1.GetOptions{}); err == nil {
		t.Errorf("the ResourceSlice of node %s is still there after its resource moved back to the device plugin", n.Name)
	}
}
