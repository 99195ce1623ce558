package deviceplugin

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/featureplug/featureplug/rules/plan"
)

// mounts formats mounts as "host->container" strings.
func mounts(ms []*pluginapi.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.GetHostPath()+"->"+m.GetContainerPath())
	}
	return out
}

// cdiNames lists the CRI CDI device names.
func cdiNames(ds []*pluginapi.CDIDevice) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.GetName())
	}
	return out
}

// mixedResources are the resources the Allocate tests use: whole GPUs,
// MIG devices, time-sliced replicas and MPS replicas.
func mixedResources() map[string]plan.Resource {
	return map[string]plan.Resource{
		"gpu": {Name: "nvidia.com/gpu", Devices: gpus(0, 1, 2)},
		"mig": {Name: "nvidia.com/mig-1g.10gb", Devices: []plan.Device{migDevice(3, 0), migDevice(3, 1)}},
		"ts": {Name: "example.com/shared", Devices: gpus(4, 5),
			Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4}},
		"ts-one": {Name: "example.com/shared-one", Devices: gpus(4, 5),
			Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4, FailRequestsGreaterThanOne: true}},
		"mps": {Name: "example.com/mps", Devices: gpus(6, 7),
			Sharing: plan.Sharing{Strategy: plan.SharingMPS, Replicas: 4}},
		"mps-limits": {Name: "example.com/mps-limits", Devices: gpus(6, 7),
			Sharing: plan.Sharing{Strategy: plan.SharingMPS, Replicas: 4, MPS: &plan.MPSLimits{PinnedMemoryLimitMiB: 10240, ActiveThreadPercentage: 30}}},
	}
}

func TestAllocateResponse(t *testing.T) {
	type want struct {
		envs        map[string]string
		mounts      []string
		cdi         []string
		annotations []string // expected values; keys are checked for the prefix
	}
	tests := []struct {
		name     string
		resource string
		modify   func(*Options)
		ids      []string
		want     want
	}{
		{"envvar uuid", "gpu", nil, gpuIDs(1, 0),
			want{envs: map[string]string{EnvVisibleDevices: gpuUUID(0) + "," + gpuUUID(1)}}},
		{"envvar index", "gpu", func(o *Options) { o.DeviceIDStrategy = DeviceIDIndex }, gpuIDs(2),
			want{envs: map[string]string{EnvVisibleDevices: "2"}}},
		{"envvar mig index", "mig", func(o *Options) { o.DeviceIDStrategy = DeviceIDIndex }, []string{migUUID(3, 1)},
			want{envs: map[string]string{EnvVisibleDevices: "3:1"}}},
		{"envvar mig uuid", "mig", nil, []string{migUUID(3, 0)},
			want{envs: map[string]string{EnvVisibleDevices: migUUID(3, 0)}}},
		{"volume mounts", "gpu", func(o *Options) { o.DeviceListStrategies = []DeviceListStrategy{DeviceListVolumeMounts} }, gpuIDs(0, 2),
			want{envs: map[string]string{EnvVisibleDevices: VolumeMountRoot},
				mounts: []string{"/dev/null->" + VolumeMountRoot + "/" + gpuUUID(0), "/dev/null->" + VolumeMountRoot + "/" + gpuUUID(2)}}},
		{"cdi cri", "gpu", func(o *Options) { o.DeviceListStrategies = []DeviceListStrategy{DeviceListCDICRI} }, gpuIDs(1),
			want{envs: map[string]string{}, cdi: []string{"nvidia.com/gpu=" + gpuUUID(1)}}},
		{"cdi cri index and own kind", "gpu", func(o *Options) {
			o.DeviceListStrategies = []DeviceListStrategy{DeviceListCDICRI}
			o.DeviceIDStrategy = DeviceIDIndex
			o.CDIKind = "example.com/accel"
		}, gpuIDs(0, 1),
			want{envs: map[string]string{}, cdi: []string{"example.com/accel=0", "example.com/accel=1"}}},
		{"cdi annotations", "gpu", func(o *Options) { o.DeviceListStrategies = []DeviceListStrategy{DeviceListCDIAnnotations} }, gpuIDs(0, 1),
			want{envs: map[string]string{}, annotations: []string{"nvidia.com/gpu=" + gpuUUID(0) + ",nvidia.com/gpu=" + gpuUUID(1)}}},
		{"all strategies", "gpu", func(o *Options) {
			o.DeviceListStrategies = []DeviceListStrategy{DeviceListEnvVar, DeviceListVolumeMounts, DeviceListCDIAnnotations, DeviceListCDICRI}
		}, gpuIDs(2),
			want{envs: map[string]string{EnvVisibleDevices: VolumeMountRoot},
				mounts:      []string{"/dev/null->" + VolumeMountRoot + "/" + gpuUUID(2)},
				cdi:         []string{"nvidia.com/gpu=" + gpuUUID(2)},
				annotations: []string{"nvidia.com/gpu=" + gpuUUID(2)}}},
		{"replicas map to their device", "ts", nil, []string{replicaID(5, 1), replicaID(4, 3), replicaID(5, 2)},
			want{envs: map[string]string{EnvVisibleDevices: gpuUUID(4) + "," + gpuUUID(5)}}},
		{"mps defaults", "mps", nil, []string{replicaID(7, 0)},
			want{envs: map[string]string{
				EnvVisibleDevices:            gpuUUID(7),
				EnvMPSPipeDirectory:          "/run/featureplug/mps/example.com_mps/pipe",
				EnvMPSActiveThreadPercentage: "25",
				EnvMPSPinnedDeviceMemLimit:   "0=20389M",
			}, mounts: []string{"/run/featureplug/mps/example.com_mps/pipe->/run/featureplug/mps/example.com_mps/pipe", "/run/featureplug/mps/shm->/dev/shm"}}},
		// MPS allows one replica per container (failRequestsGreaterThanOne
		// is forced; TestAllocateMPSOneReplica checks the refusal).
		{"mps limits", "mps-limits", func(o *Options) { o.MPSRoot = "/mps" }, []string{replicaID(7, 1)},
			want{envs: map[string]string{
				EnvVisibleDevices:            gpuUUID(7),
				EnvMPSPipeDirectory:          "/mps/example.com_mps-limits/pipe",
				EnvMPSActiveThreadPercentage: "30",
				EnvMPSPinnedDeviceMemLimit:   "0=10240M",
			}, mounts: []string{"/mps/example.com_mps-limits/pipe->/mps/example.com_mps-limits/pipe", "/mps/shm->/dev/shm"}}},
	}
	resources := mixedResources()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions()
			if tt.modify != nil {
				tt.modify(&o)
			}
			o, err := o.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			ds := newDeviceSet(resources[tt.resource], nvlinkGroups(8, 4))
			resp, err := ds.containerResponse(tt.ids, &o)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(resp.GetEnvs(), tt.want.envs) {
				t.Errorf("envs = %v, want %v", resp.GetEnvs(), tt.want.envs)
			}
			if got := mounts(resp.GetMounts()); !slices.Equal(got, tt.want.mounts) {
				t.Errorf("mounts = %v, want %v", got, tt.want.mounts)
			}
			if got := cdiNames(resp.GetCdiDevices()); !slices.Equal(got, tt.want.cdi) {
				t.Errorf("CDI devices = %v, want %v", got, tt.want.cdi)
			}
			var vals []string
			for k, v := range resp.GetAnnotations() {
				if !strings.HasPrefix(k, o.CDIAnnotationPrefix+cdiAnnotationPlugin+"_") {
					t.Errorf("annotation key %q lacks prefix %q", k, o.CDIAnnotationPrefix+cdiAnnotationPlugin+"_")
				}
				vals = append(vals, v)
			}
			if !slices.Equal(vals, tt.want.annotations) {
				t.Errorf("annotation values = %v, want %v", vals, tt.want.annotations)
			}
			if len(resp.GetAnnotations()) > 0 {
				_, devs, err := cdiapi.ParseAnnotations(resp.GetAnnotations())
				if err != nil || len(devs) == 0 {
					t.Errorf("CDI cannot parse the annotations %v: %v", resp.GetAnnotations(), err)
				}
			}
		})
	}
}

func TestCDIAnnotationPrefix(t *testing.T) {
	o, err := Options{DeviceListStrategies: []DeviceListStrategy{DeviceListCDIAnnotations}, CDIAnnotationPrefix: "cdi.example.org/"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ds := newDeviceSet(mixedResources()["gpu"], nil)
	a, err := ds.containerResponse(gpuIDs(0), &o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ds.containerResponse(gpuIDs(0), &o)
	if err != nil {
		t.Fatal(err)
	}
	for k := range a.GetAnnotations() {
		if !strings.HasPrefix(k, "cdi.example.org/featureplug_") {
			t.Errorf("annotation key %q does not use the configured prefix", k)
		}
		if _, same := b.GetAnnotations()[k]; same {
			t.Errorf("two allocations share annotation key %q; keys must be unique per container", k)
		}
	}
}

func TestAllocateErrors(t *testing.T) {
	tests := []struct {
		name     string
		resource string
		ids      []string
		want     []string
	}{
		{"unknown", "gpu", []string{gpuUUID(0), "GPU-nope", "GPU-gone"}, []string{"unknown device IDs", "GPU-nope", "GPU-gone"}},
		{"replica of a plain resource", "gpu", []string{replicaID(0, 0)}, []string{"unknown device IDs", replicaID(0, 0)}},
		{"plain ID of a shared resource", "ts", gpuIDs(4), []string{"unknown device IDs", gpuUUID(4)}},
		{"over the limit", "ts-one", []string{replicaID(4, 0), replicaID(5, 0)}, []string{"failRequestsGreaterThanOne", replicaID(4, 0), replicaID(5, 0)}},
		{"over the limit on one device", "ts-one", []string{replicaID(4, 0), replicaID(4, 1)}, []string{"failRequestsGreaterThanOne"}},
		{"empty", "gpu", nil, []string{"names no devices"}},
	}
	o, err := DefaultOptions().withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	resources := mixedResources()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDeviceSet(resources[tt.resource], nil)
			_, err := ds.containerResponse(tt.ids, &o)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error = %v, want InvalidArgument", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// One replica is fine under failRequestsGreaterThanOne.
	if _, err := newDeviceSet(resources["ts-one"], nil).containerResponse([]string{replicaID(5, 3)}, &o); err != nil {
		t.Errorf("single replica: %v", err)
	}
}

// mixedPlan serves every resource of mixedResources.
func mixedPlan() *plan.Plan {
	p := &plan.Plan{Links: nvlinkGroups(8, 4)}
	for _, r := range mixedResources() {
		p.Resources = append(p.Resources, r)
	}
	slices.SortFunc(p.Resources, func(a, b plan.Resource) int { return strings.Compare(a.Name, b.Name) })
	return p
}

func TestAllocateOverGRPC(t *testing.T) {
	opts := DefaultOptions()
	opts.DeviceListStrategies = []DeviceListStrategy{DeviceListEnvVar, DeviceListCDICRI}
	e := startEnv(t, opts, mixedPlan())
	e.waitRegistered(1, "nvidia.com/gpu", "example.com/shared-one")

	resp, err := e.kubelet.Allocate(e.ctx(), "nvidia.com/gpu", gpuIDs(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.GetEnvs()[EnvVisibleDevices], gpuUUID(0)+","+gpuUUID(2); got != want {
		t.Errorf("%s = %q, want %q", EnvVisibleDevices, got, want)
	}
	if got, want := cdiNames(resp.GetCdiDevices()), []string{"nvidia.com/gpu=" + gpuUUID(0), "nvidia.com/gpu=" + gpuUUID(2)}; !slices.Equal(got, want) {
		t.Errorf("CDI devices = %v, want %v", got, want)
	}

	_, err = e.kubelet.Allocate(e.ctx(), "nvidia.com/gpu", []string{"GPU-nope"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "GPU-nope") {
		t.Errorf("unknown ID: error %v, want InvalidArgument naming GPU-nope", err)
	}
	_, err = e.kubelet.Allocate(e.ctx(), "example.com/shared-one", []string{replicaID(4, 0), replicaID(5, 0)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), replicaID(5, 0)) {
		t.Errorf("over the limit: error %v, want InvalidArgument naming the IDs", err)
	}

	// Several containers in one request get one response each.
	client, err := e.kubelet.Client("nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	multi, err := client.Allocate(e.ctx(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: gpuIDs(0)}, {DevicesIds: gpuIDs(1)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(multi.GetContainerResponses()); n != 2 || multi.GetContainerResponses()[1].GetEnvs()[EnvVisibleDevices] != gpuUUID(1) {
		t.Errorf("two containers: got %d responses: %v", n, multi.GetContainerResponses())
	}
	pre, err := client.PreStartContainer(e.ctx(), &pluginapi.PreStartContainerRequest{DevicesIds: gpuIDs(0)})
	if err != nil || pre == nil {
		t.Errorf("PreStartContainer = %v, %v", pre, err)
	}
}

func TestAllocateGate(t *testing.T) {
	opts := DefaultOptions()
	opts.Gate = func(resource string) (bool, string) {
		if resource == "example.com/mps" {
			return false, "MPS control daemon is not running"
		}
		return true, ""
	}
	e := startEnv(t, opts, mixedPlan())
	e.waitRegistered(1, "example.com/mps", "nvidia.com/gpu")
	_, err := e.kubelet.Allocate(e.ctx(), "example.com/mps", []string{replicaID(6, 0)})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "MPS control daemon is not running") {
		t.Errorf("gated resource: error %v, want Unavailable with the reason", err)
	}
	if _, err := e.kubelet.Allocate(e.ctx(), "nvidia.com/gpu", gpuIDs(0)); err != nil {
		t.Errorf("ungated resource: %v", err)
	}
}
