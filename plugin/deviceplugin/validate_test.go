package deviceplugin

import (
	"strings"
	"testing"

	"github.com/featureplug/featureplug/rules/plan"
)

func TestValidatePlan(t *testing.T) {
	bad := gpuDevice(0)
	bad.ID = "GPU/0"
	noParent := gpuDevice(1)
	noParent.GPUUUID = ""
	replicaLike := gpuDevice(2)
	replicaLike.ID = "GPU-2::1"
	tests := []struct {
		name string
		plan *plan.Plan
		want []string // substrings of the error; none means valid
	}{
		{"valid", h100Plan("nvidia.com/gpu"), nil},
		{"empty", &plan.Plan{}, nil},
		{"nil", nil, []string{"nil plan"}},
		{"bad name", &plan.Plan{Resources: []plan.Resource{{Name: "gpu"}}}, []string{"resources[0].name", `"gpu"`}},
		{"duplicate", &plan.Plan{Resources: []plan.Resource{{Name: "a.b/c"}, {Name: "a.b/c"}}}, []string{"resources[1].name", "repeats resources[0]"}},
		{"bad device id", &plan.Plan{Resources: []plan.Resource{{Name: "a.b/c", Devices: []plan.Device{bad}}}}, []string{"resources[0] (a.b/c).devices[0].id", "GPU/0"}},
		{"replica-like id", &plan.Plan{Resources: []plan.Resource{{Name: "a.b/c", Devices: []plan.Device{replicaLike}}}}, []string{"devices[0].id", "reserved for replica IDs"}},
		{"no parent", &plan.Plan{Resources: []plan.Resource{{Name: "a.b/c", Devices: []plan.Device{noParent}}}}, []string{"devices[0].gpuUUID"}},
		{"duplicate device", &plan.Plan{Resources: []plan.Resource{{Name: "a.b/c", Devices: gpus(1, 1)}}}, []string{"devices[1].id", "appears twice"}},
		{"bad strategy", &plan.Plan{Resources: []plan.Resource{{Name: "a.b/c", Sharing: plan.Sharing{Strategy: "magic"}}}}, []string{"sharing.strategy", `"magic"`}},
		{"negative replicas", &plan.Plan{Resources: []plan.Resource{{Name: "a.b/c", Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: -2}}}}, []string{"sharing.replicas", "-2"}},
		{"bad mps", &plan.Plan{Resources: []plan.Resource{{Name: "a.b/c", Sharing: plan.Sharing{Strategy: plan.SharingMPS, Replicas: 2, MPS: &plan.MPSLimits{ActiveThreadPercentage: 150}}}}}, []string{"mps.activeThreadPercentage", "150"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validatePlan(tt.plan)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("validatePlan: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("validatePlan accepted an invalid plan")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestApplyInvalidPlanKeepsServing(t *testing.T) {
	e := startEnv(t, DefaultOptions(), h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	if err := e.m.Apply(&plan.Plan{Resources: []plan.Resource{{Name: "not a name"}}}); err == nil {
		t.Fatal("Apply accepted an invalid plan")
	}
	if !e.m.Registered("nvidia.com/gpu") || e.kubelet.Registrations("nvidia.com/gpu") != 1 || !e.kubelet.Streaming("nvidia.com/gpu") {
		t.Error("an invalid plan disturbed the running resource")
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Options)
		want   string // error substring; empty means valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"zero value", func(o *Options) { *o = Options{} }, ""},
		{"all strategies", func(o *Options) {
			o.DeviceListStrategies = []DeviceListStrategy{DeviceListEnvVar, DeviceListVolumeMounts, DeviceListCDIAnnotations, DeviceListCDICRI}
		}, ""},
		{"unknown strategy", func(o *Options) { o.DeviceListStrategies = []DeviceListStrategy{"env"} }, `deviceListStrategies[0]: unknown strategy "env"`},
		{"twice", func(o *Options) { o.DeviceListStrategies = []DeviceListStrategy{"envvar", "envvar"} }, `deviceListStrategies[1]: strategy "envvar" given twice`},
		{"id strategy", func(o *Options) { o.DeviceIDStrategy = "serial" }, `deviceIDStrategy: unknown strategy "serial"`},
		{"policy", func(o *Options) { o.ReplicaPolicy = "random" }, `replicaPolicy: unknown policy "random"`},
		{"cdi kind", func(o *Options) { o.CDIKind = "nvidia.com" }, `cdiKind: "nvidia.com"`},
		{"cdi vendor", func(o *Options) { o.CDIKind = "nvidia com/gpu" }, `cdiKind: "nvidia com/gpu"`},
		{"prefix", func(o *Options) { o.CDIAnnotationPrefix = "cdi.k8s.io" }, `cdiAnnotationPrefix: "cdi.k8s.io"`},
		{"relative dir", func(o *Options) { o.KubeletDir = "device-plugins" }, `kubeletDir: "device-plugins"`},
		{"long dir", func(o *Options) { o.KubeletDir = "/" + strings.Repeat("d", 100) }, "kubeletDir: directory"},
		{"relative mps", func(o *Options) { o.MPSRoot = "mps" }, `mpsRoot: "mps"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions()
			tt.modify(&o)
			_, err := NewManager(o)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("NewManager: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("NewManager accepted options; want error %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("NewManager error %q does not contain %q", err, tt.want)
			}
		})
	}
}
