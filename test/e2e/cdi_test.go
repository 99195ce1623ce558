package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/featureplug/featureplug/test/harness"
)

// cdiRules advertises whole GPUs as one resource and each MIG profile as
// its own; the tests rename cdiGPUResource.
const cdiRules = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: mig
  devices: mig
  resource: 'example.com/mig-{{ .profile | replace "+" "." }}'
- name: gpu
  devices: gpu
  resource: example.com/gpu
`

// Resource names of cdiRules before and after the rename.
const (
	cdiGPUResource     = "example.com/gpu"
	cdiRenamedResource = "example.com/accel"
	// cdiKind is the CDI vendor/class the agent is run with.
	cdiKind = "nvidia.com/gpu"
	// cdiAnnotationResource is the spec's device annotation naming the
	// resource (plugin/cdi.AnnotationResource).
	cdiAnnotationResource = "featureplug.io/resource"
)

// cdiOriginalMIG and cdiNewMIG are GPU 0's MIG layout in the fake node
// a100-80gb-mixed and the layout the test re-partitions it to.
const (
	cdiOriginalMIG = `    mig:
      - profile: 3g.40gb
      - profile: 2g.20gb
      - profile: 1g.10gb
      - profile: 1g.10gb+me
`
	cdiNewMIG = `    mig:
      - profile: 4g.40gb
      - profile: 1g.10gb
        count: 3
`
)

// cdiDevice is one device of `featureplug discover -o json` with what its
// CDI device nodes depend on.
type cdiDevice struct {
	uuid, index string
	gpuMinor    int
	mig         bool
	gi, ci      int
}

// cdiDiscover lists the node's devices a plan can advertise: whole GPUs
// not in MIG mode and MIG devices.
func cdiDiscover(t *testing.T, fakeNode string) map[string]cdiDevice {
	t.Helper()
	out, err := exec.Command(build.agent, "discover", "--fake-node", fakeNode, "-o", "json").Output()
	if err != nil {
		t.Fatalf("featureplug discover --fake-node %s: %v", fakeNode, err)
	}
	var doc struct {
		Inventory struct {
			GPUs []struct {
				Index      int    `json:"index"`
				Minor      int    `json:"minor"`
				UUID       string `json:"uuid"`
				MIGEnabled bool   `json:"migEnabled"`
				MIGDevices []struct {
					Index int    `json:"index"`
					UUID  string `json:"uuid"`
					GI    int    `json:"gpuInstanceID"`
					CI    int    `json:"computeInstanceID"`
				} `json:"migDevices"`
			} `json:"gpus"`
		} `json:"inventory"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("decoding featureplug discover --fake-node %s: %v", fakeNode, err)
	}
	inv := doc.Inventory
	devs := map[string]cdiDevice{}
	for _, g := range inv.GPUs {
		if !g.MIGEnabled {
			devs[g.UUID] = cdiDevice{uuid: g.UUID, index: strconv.Itoa(g.Index), gpuMinor: g.Minor}
		}
		for _, m := range g.MIGDevices {
			devs[m.UUID] = cdiDevice{uuid: m.UUID, index: fmt.Sprintf("%d:%d", g.Index, m.Index), gpuMinor: g.Minor, mig: true, gi: m.GI, ci: m.CI}
		}
	}
	return devs
}

// cdiMIGCapMinor is the device minor of a MIG capability as the driver
// numbers them in /proc/driver/nvidia-caps/mig-minors (and the fake
// driver root, fakenode.MIGCapMinor, which this package cannot import: it
// links go-nvml, whose symbols a race-enabled test binary binds at start):
// per GPU 15 GPU instances, each followed by its 8 compute instances,
// after "config" 1 and "monitor" 2. ci < 0 is the GPU instance's.
func cdiMIGCapMinor(gpu, gi, ci int) int {
	base := 3 + (gpu*15+gi)*9
	if ci < 0 {
		return base
	}
	return base + 1 + ci
}

// wantNodes are the container paths of the device nodes d must get.
func (d cdiDevice) wantNodes() []string {
	out := []string{fmt.Sprintf("/dev/nvidia%d", d.gpuMinor)}
	if d.mig {
		out = append(out,
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", cdiMIGCapMinor(d.gpuMinor, d.gi, -1)),
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", cdiMIGCapMinor(d.gpuMinor, d.gi, d.ci)))
	}
	return out
}

// cdiLoad loads the spec directory with the CDI library's cache, as a
// container runtime does; any spec error fails the test.
func cdiLoad(t *testing.T, dir string) *cdiapi.Cache {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("CDI cache over %s: %v", dir, err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI specs in %s do not load: %v", dir, errs)
	}
	return cache
}

// cdiSpecState describes the agent's spec as the CDI library loads it:
// device name -> resource annotation; ok false while it does not load.
func cdiSpecState(dir string) (map[string]string, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, err
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		return nil, fmt.Errorf("%v", errs)
	}
	out := map[string]string{}
	for _, name := range cache.ListDevices() {
		if strings.HasPrefix(name, cdiKind+"=") {
			out[strings.TrimPrefix(name, cdiKind+"=")] = cache.GetDevice(name).Annotations[cdiAnnotationResource]
		}
	}
	return out, nil
}

// cdiWaitSpec waits until the agent's spec lists exactly the devices of
// want (by name) and cond holds for each device's resource annotation.
func cdiWaitSpec(t *testing.T, dir string, want map[string]cdiDevice, cond func(name, resource string) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		got, err := cdiSpecState(dir)
		if err != nil {
			return false, err.Error()
		}
		if len(got) != len(want) {
			return false, fmt.Sprintf("spec devices %v, want %d", got, len(want))
		}
		for name, res := range got {
			if _, ok := want[name]; !ok || !cond(name, res) {
				return false, fmt.Sprintf("spec devices %v", got)
			}
		}
		return true, ""
	}); err != nil {
		t.Fatalf("CDI spec in %s: %v", dir, err)
	}
}

// cdiNames returns the CDI names of an allocation: its CRI CDI devices
// and the devices its CDI annotations name.
func cdiNames(t *testing.T, got *harness.Allocation) []string {
	t.Helper()
	names := slices.Clone(got.CDIDevices)
	if len(got.Annotations) > 0 {
		_, devs, err := cdiapi.ParseAnnotations(got.Annotations)
		if err != nil {
			t.Fatalf("CDI annotations %v: %v", got.Annotations, err)
		}
		names = append(names, devs...)
	}
	return names
}

// cdiCheckAllocation allocates n devices of resource through the kubelet's
// device manager and checks that every CDI name Allocate returns resolves
// through the CDI library to the device nodes of the allocated devices.
func cdiCheckAllocation(t *testing.T, peer *harness.KubeletPeer, specDir, driverRoot, resource string, n int, devs map[string]cdiDevice) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pod := "cdi-" + strings.NewReplacer("/", "-", ".", "-").Replace(resource)
	got, err := peer.Allocate(ctx, pod, "main", resource, n)
	if err != nil {
		t.Fatalf("allocating %d %s: %v", n, resource, err)
	}
	defer peer.RemovePod(pod)
	ids := got.DeviceIDs[resource]
	names := cdiNames(t, got)
	if len(names) != len(ids) {
		t.Fatalf("%s: Allocate returned CDI names %v for devices %v", resource, names, ids)
	}
	cache := cdiLoad(t, specDir)
	for _, name := range names {
		d := cache.GetDevice(name)
		if d == nil {
			t.Errorf("%s: CDI name %s does not resolve (spec devices %v)", resource, name, cache.ListDevices())
			continue
		}
		id := strings.TrimPrefix(name, cdiKind+"=")
		dev, ok := devs[id]
		if !ok || !slices.Contains(ids, id) {
			t.Errorf("%s: CDI name %s is not one of the allocated devices %v", resource, name, ids)
			continue
		}
		var nodes []string
		for _, dn := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, dn.Path)
			if !strings.HasPrefix(dn.HostPath, driverRoot) {
				t.Errorf("%s: device node %s has host path %s outside the driver root %s", name, dn.Path, dn.HostPath, driverRoot)
			}
		}
		if want := dev.wantNodes(); !slices.Equal(nodes, want) {
			t.Errorf("%s: device nodes %v, want %v", name, nodes, want)
		}
		if res := d.Annotations[cdiAnnotationResource]; res != resource {
			t.Errorf("%s: resource annotation %q, want %q", name, res, resource)
		}
	}
}

// TestCDISpec runs the agent with each CDI device-list strategy against
// the kubelet's device manager: the spec it writes names exactly the
// advertised devices, every CDI name Allocate returns resolves through the
// CDI library to the expected device nodes, a stale spec of an earlier
// vendor/class is removed and others' specs are kept, and the spec follows
// a rules rename and a MIG re-partition within one re-discovery.
func TestCDISpec(t *testing.T) {
	for _, strategy := range []string{"cdi-annotations", "cdi-cri"} {
		t.Run(strategy, func(t *testing.T) { cdiTestStrategy(t, strategy) })
	}
}

func cdiTestStrategy(t *testing.T, strategy string) {
	dir := shortTempDir(t)
	specDir := filepath.Join(dir, "cdi")
	driverRoot := filepath.Join(dir, "driver")
	if err := os.MkdirAll(specDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A spec an earlier run wrote for another vendor/class, and a spec of
	// someone else's.
	stale := filepath.Join(specDir, "featureplug-example.com_old.yaml")
	foreign := filepath.Join(specDir, "other.yaml")
	for path, kind := range map[string]string{stale: "example.com/old", foreign: "other.com/dev"} {
		spec := fmt.Sprintf("cdiVersion: 0.5.0\nkind: %s\ndevices:\n- name: x\n  containerEdits:\n    env: [X=1]\n", kind)
		if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nodeFile := copyFile(t, bundledFakeNode("a100-80gb-mixed"), dir, "node.yaml")
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(cdiRules), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	a := startAgent(t, agentSpec{
		Node:       "cdi-" + strategy,
		FakeNode:   nodeFile,
		Rules:      rulesFile,
		KubeletDir: kubeletDir,
		Extra: []string{
			"--device-list-strategy", strategy,
			"--cdi-kind", cdiKind,
			"--cdi-spec-dir", specDir,
			"--driver-root", driverRoot,
			// Only SIGHUP re-discovers, so "within one re-discovery"
			// can be counted.
			"--rediscover-interval", "1h",
		},
	})
	devs := cdiDiscover(t, nodeFile)
	// GPU 1 whole; GPU 0's four MIG devices, one per profile.
	migResources := map[string]int64{"example.com/mig-3g.40gb": 1, "example.com/mig-2g.20gb": 1, "example.com/mig-1g.10gb": 1, "example.com/mig-1g.10gb.me": 1}
	want := map[string]int64{cdiGPUResource: 1}
	for r, n := range migResources {
		want[r] = n
	}
	waitCapacities(t, peer, want)
	cdiWaitSpec(t, specDir, devs, func(_, res string) bool { return res != "" })

	t.Run("StaleRemovedOthersKept", func(t *testing.T) {
		if _, err := os.Stat(stale); !os.IsNotExist(err) {
			t.Errorf("stale spec %s: stat = %v, want it removed", stale, err)
		}
		if _, err := os.Stat(foreign); err != nil {
			t.Errorf("another's spec %s: %v, want it kept", foreign, err)
		}
		entries, _ := os.ReadDir(specDir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if want := []string{"featureplug-nvidia.com_gpu.yaml", "other.yaml"}; !slices.Equal(names, want) {
			t.Errorf("spec directory holds %v, want %v", names, want)
		}
	})

	t.Run("AllocatedNamesResolve", func(t *testing.T) {
		for r, n := range want {
			cdiCheckAllocation(t, peer, specDir, driverRoot, r, int(n), devs)
		}
	})

	t.Run("RulesRename", func(t *testing.T) {
		writeFileAtomic(t, rulesFile, []byte(strings.ReplaceAll(cdiRules, cdiGPUResource, cdiRenamedResource)))
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := peer.WaitCapacity(ctx, cdiRenamedResource, 1, 1); err != nil {
			t.Fatal(err)
		}
		cdiWaitSpec(t, specDir, devs, func(_, res string) bool { return res != cdiGPUResource })
		cdiCheckAllocation(t, peer, specDir, driverRoot, cdiRenamedResource, 1, devs)
	})

	t.Run("MIGRepartition", func(t *testing.T) {
		before := a.metric(t, "featureplug_discoveries_total", `result="ok"`)
		data, err := os.ReadFile(nodeFile)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(cdiOriginalMIG)) {
			t.Fatalf("%s does not hold the MIG layout this test replaces", nodeFile)
		}
		writeFileAtomic(t, nodeFile, bytes.Replace(data, []byte(cdiOriginalMIG), []byte(cdiNewMIG), 1))
		newDevs := cdiDiscover(t, nodeFile)
		a.hup(t)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := peer.WaitCapacity(ctx, "example.com/mig-4g.40gb", 1, 1); err != nil {
			t.Fatal(err)
		}
		if err := peer.WaitCapacity(ctx, "example.com/mig-1g.10gb", 3, 3); err != nil {
			t.Fatal(err)
		}
		cdiWaitSpec(t, specDir, newDevs, func(string, string) bool { return true })
		if after := a.metric(t, "featureplug_discoveries_total", `result="ok"`); after != before+1 {
			t.Errorf("the spec followed after %v re-discoveries, want 1", after-before)
		}
		// The old layout's MIG devices are gone from the spec.
		cache := cdiLoad(t, specDir)
		for id, d := range devs {
			if _, still := newDevs[id]; d.mig && !still && cache.GetDevice(cdiKind+"="+id) != nil {
				t.Errorf("MIG device %s of the old layout still resolves", id)
			}
		}
		cdiCheckAllocation(t, peer, specDir, driverRoot, "example.com/mig-4g.40gb", 1, newDevs)
		cdiCheckAllocation(t, peer, specDir, driverRoot, "example.com/mig-1g.10gb", 3, newDevs)
	})
}
