package render

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/featureplug/featureplug/test/manifests"
)

// TestHelmMatchesKustomize renders the chart with values and compares the
// objects, field by field, with the kustomize rendering that means the same
// deployment. The defaults must equal overlays/nodefeature.
func TestHelmMatchesKustomize(t *testing.T) {
	for _, tc := range []struct {
		name      string
		values    map[string]any
		kustomize func(t *testing.T) []*unstructured.Unstructured
		// namespace: Helm renders the Namespace only with createNamespace.
		namespace bool
	}{
		{
			name:      "defaults = overlays/nodefeature",
			kustomize: func(t *testing.T) []*unstructured.Unstructured { return kustomize(t, "overlays/nodefeature") },
		},
		{
			name:      "createNamespace = overlays/nodefeature with its Namespace",
			values:    map[string]any{"createNamespace": true},
			kustomize: func(t *testing.T) []*unstructured.Unstructured { return kustomize(t, "overlays/nodefeature") },
			namespace: true,
		},
		{
			name:      "publish=file = overlays/features-d",
			values:    map[string]any{"publish": "file"},
			kustomize: func(t *testing.T) []*unstructured.Unstructured { return kustomize(t, "overlays/features-d") },
		},
		{
			name:   "mps.enabled = overlays/nodefeature + components/mps",
			values: map[string]any{"mps": map[string]any{"enabled": true}},
			kustomize: func(t *testing.T) []*unstructured.Unstructured {
				return composed(t, "overlays/nodefeature", "components/mps")
			},
		},
		{
			name:   "driverRoot = overlays/nodefeature + components/driver-container",
			values: map[string]any{"driverRoot": "/run/nvidia/driver"},
			kustomize: func(t *testing.T) []*unstructured.Unstructured {
				return composed(t, "overlays/nodefeature", "components/driver-container")
			},
		},
		{
			name:   "driverRoot=/ = overlays/nodefeature + components/driver-root",
			values: map[string]any{"driverRoot": "/"},
			kustomize: func(t *testing.T) []*unstructured.Unstructured {
				return composed(t, "overlays/nodefeature", "components/driver-root")
			},
		},
		{
			name:   "migMonitorDevices = overlays/nodefeature + components/mig-monitor",
			values: map[string]any{"migMonitorDevices": true},
			kustomize: func(t *testing.T) []*unstructured.Unstructured {
				return composed(t, "overlays/nodefeature", "components/mig-monitor")
			},
		},
		{
			name:   "cdi-annotations = overlays/nodefeature + components/cdi",
			values: map[string]any{"deviceListStrategy": []any{"cdi-annotations"}},
			kustomize: func(t *testing.T) []*unstructured.Unstructured {
				return composed(t, "overlays/nodefeature", "components/cdi")
			},
		},
		{
			name:   "runtimeClassName=nvidia = overlays/nodefeature + components/runtimeclass",
			values: map[string]any{"runtimeClassName": "nvidia"},
			kustomize: func(t *testing.T) []*unstructured.Unstructured {
				return composed(t, "overlays/nodefeature", "components/runtimeclass")
			},
		},
		{
			name:   "dra.enabled = overlays/nodefeature + components/dra",
			values: map[string]any{"dra": map[string]any{"enabled": true}},
			kustomize: func(t *testing.T) []*unstructured.Unstructured {
				return composed(t, "overlays/nodefeature", "components/dra")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.kustomize(t)
			if !tc.namespace {
				want = withoutNamespace(want)
			}
			// Helm's own labels (chart, instance, version, managed-by)
			// are checked in test/e2e/secure_manifests_test.go.
			got := withoutHelmLabels(helm(t, tc.values))
			diffs, err := manifests.Diff(want, got)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Errorf("helm differs from kustomize: %s", d)
			}
		})
	}
}

// TestHelmValuesReachFlags sets the value of every agent flag and checks
// that the flag reaches the agent with that value.
func TestHelmValuesReachFlags(t *testing.T) {
	values := map[string]any{
		"publish":              "file",
		"featuresDir":          "/var/lib/nfd/features.d",
		"featuresFileName":     "gpus",
		"nodeFeatureNamespace": "nfd",
		"resyncInterval":       "30m",
		"nodeName":             "node-a",
		"kubeconfig":           "/etc/featureplug/kubeconfig",
		"fakeNode":             "dgx-a100",
		"driverRoot":           "/run/nvidia/driver",
		"nvmlLibrary":          "/host/usr/lib64/libnvidia-ml.so.1",
		"rediscoverInterval":   "1m",
		"rules":                map[string]any{"builtin": "per-model"},
		"nodeLabels":           map[string]any{"pool": "inference", "example.com/rack": "r7"},
		"kubeletDir":           "/var/lib/kubelet/device-plugins",
		"deviceListStrategy":   []any{"envvar", "cdi-annotations"},
		"deviceIDStrategy":     "index",
		"cdiKind":              "example.com/gpu",
		"cdiAnnotationPrefix":  "cdi.example.com/",
		"replicaPolicy":        "packed",
		"healthRecovery":       "10m",
		"ignoredXIDs":          []any{13, 43},
		"mps":                  map[string]any{"enabled": true, "root": "/run/mps", "control": "/host/usr/bin/nvidia-cuda-mps-control"},
		"metricsPort":          9400,
		"logFormat":            "json",
		"logLevel":             "debug",
		"extraArgs":            []any{"--some-future-flag=1"},
		"dra": map[string]any{"enabled": true, "serve": "device-plugin", "registryDir": "/var/lib/k0s/kubelet/plugins_registry",
			"pluginDir": "/var/lib/k0s/kubelet/plugins/gpu.featureplug.io"},
	}
	// Every flag of `featureplug run` and the value it must get.
	want := map[string]string{
		"node-name":             "node-a",
		"namespace":             "nfd",
		"kubeconfig":            "/etc/featureplug/kubeconfig",
		"fake-node":             "dgx-a100",
		"driver-root":           "/host",
		"nvml-library":          "/host/usr/lib64/libnvidia-ml.so.1",
		"rules":                 "per-model",
		"node-labels":           "example.com/rack=r7,pool=inference",
		"publish":               "file",
		"features-file":         "/var/lib/nfd/features.d/gpus",
		"resync-interval":       "30m",
		"rediscover-interval":   "1m",
		"kubelet-dir":           "/var/lib/kubelet/device-plugins",
		"device-list-strategy":  "envvar,cdi-annotations",
		"device-id-strategy":    "index",
		"cdi-kind":              "example.com/gpu",
		"cdi-annotation-prefix": "cdi.example.com/",
		"cdi-spec-dir":          "/var/run/cdi",
		"replica-policy":        "packed",
		"health-recovery":       "10m",
		"ignored-xids":          "13,43",
		"mps-root":              "/run/mps",
		"mps-control":           "/host/usr/bin/nvidia-cuda-mps-control",
		"metrics-addr":          ":9400",
		"log-format":            "json",
		"log-level":             "debug",
		"serve":                 "device-plugin",
		"kubelet-registry-dir":  "/var/lib/k0s/kubelet/plugins_registry",
		"dra-plugin-dir":        "/var/lib/k0s/kubelet/plugins/gpu.featureplug.io",
	}
	objs := helm(t, values)
	ds := daemonSet(t, objs)
	c := agent(t, ds)
	for flag, v := range want {
		got, ok := flagValue(c.Args, flag)
		if !ok || got != v {
			t.Errorf("--%s: got %q (present %v), want %q", flag, got, ok, v)
		}
	}
	if last := c.Args[len(c.Args)-1]; last != "--some-future-flag=1" {
		t.Errorf("extraArgs are not appended: last arg %q", last)
	}
	if v := volume(ds, "driver-root"); v == nil || v.HostPath == nil || v.HostPath.Path != "/run/nvidia/driver" {
		t.Errorf("driverRoot is not the driver-root volume's host path: %+v", v)
	}
	if has(objs, "ConfigMap", rulesConfigMap) || volume(ds, "rules") != nil {
		t.Errorf("a builtin rules set needs no ConfigMap")
	}
	// publish=file: no NodeFeature rights, no policy.
	for _, kind := range []string{"Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, o := range objs {
			if o.GetKind() == kind {
				t.Errorf("publish=file renders %s %s", kind, o.GetName())
			}
		}
	}

	// Flags left at the agent's default are not passed.
	defaults := agent(t, daemonSet(t, helm(t, nil)))
	var flags []string
	for _, a := range defaults.Args[1:] {
		f, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags = append(flags, f)
	}
	wantDefault := []string{"kubelet-dir", "rules", "metrics-addr", "state-dir", "publish"}
	if !slices.Equal(flags, wantDefault) {
		t.Errorf("default flags %v, want %v", flags, wantDefault)
	}
}

// TestHelmRulesSources checks the three ways the chart gets rules.
func TestHelmRulesSources(t *testing.T) {
	const content = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: gpu\n  devices: gpu\n  resource: example.com/gpu\n"
	for _, tc := range []struct {
		name          string
		rules         map[string]any
		wantFlag      string
		wantConfigMap string // mounted ConfigMap; "" for none
		wantContent   string // content of the chart's ConfigMap; "" when it renders none
	}{
		{name: "default", rules: nil, wantFlag: "/etc/featureplug/rules/rules.yaml",
			wantConfigMap: rulesConfigMap, wantContent: "chart"},
		{name: "content", rules: map[string]any{"content": content}, wantFlag: "/etc/featureplug/rules/rules.yaml",
			wantConfigMap: rulesConfigMap, wantContent: content},
		{name: "existingConfigMap", rules: map[string]any{"existingConfigMap": "my-rules"},
			wantFlag: "/etc/featureplug/rules/rules.yaml", wantConfigMap: "my-rules"},
		{name: "builtin", rules: map[string]any{"builtin": "single"}, wantFlag: "single"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{}
			if tc.rules != nil {
				values["rules"] = tc.rules
			}
			objs := helm(t, values)
			ds := daemonSet(t, objs)
			if got, _ := flagValue(agent(t, ds).Args, "rules"); got != tc.wantFlag {
				t.Errorf("--rules=%q, want %q", got, tc.wantFlag)
			}
			v := volume(ds, "rules")
			switch {
			case tc.wantConfigMap == "" && v != nil:
				t.Errorf("rules volume %+v, want none", v)
			case tc.wantConfigMap != "" && (v == nil || v.ConfigMap == nil || v.ConfigMap.Name != tc.wantConfigMap):
				t.Errorf("rules volume %+v, want ConfigMap %s", v, tc.wantConfigMap)
			}
			if tc.wantContent == "" {
				if has(objs, "ConfigMap", rulesConfigMap) {
					t.Errorf("the chart renders ConfigMap %s", rulesConfigMap)
				}
				return
			}
			got, _, _ := unstructured.NestedString(find(t, objs, "ConfigMap", rulesConfigMap).Object, "data", "rules.yaml")
			if tc.wantContent == "chart" {
				tc.wantContent = string(readChartFile(t, "files/rules.yaml"))
			}
			if got != tc.wantContent {
				t.Errorf("rules.yaml:\n%s\nwant:\n%s", got, tc.wantContent)
			}
		})
	}
}

// TestHelmNotesSayWhereNVMLComesFrom: the NOTES say which source of NVML
// the release uses, and, without a RuntimeClass or driver root, what to
// do when the default runtime is not NVIDIA's.
func TestHelmNotesSayWhereNVMLComesFrom(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   []string
	}{
		{nil, []string{"from the container runtime's default, which must be the NVIDIA runtime", "--set runtimeClassName=nvidia"}},
		{map[string]any{"runtimeClassName": "nvidia"}, []string{"from the NVIDIA runtime of RuntimeClass nvidia"}},
		{map[string]any{"driverRoot": "/run/nvidia/driver"}, []string{"from the driver root /run/nvidia/driver on the host (privileged container)"}},
	} {
		notes, err := HelmNotes(filepath.Join(manifestsDir(t), "helm", "featureplug"), name, namespace, tc.values)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(notes, w) {
				t.Errorf("values %v: NOTES lack %q:\n%s", tc.values, w, notes)
			}
		}
	}
}

// TestHelmRefusesNVIDIAValues: a value of NVIDIA's device-plugin chart
// fails the render with the featureplug value to use, not the schema's
// "additional properties not allowed".
func TestHelmRefusesNVIDIAValues(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"migStrategy": "mixed"}, "migStrategy is a value of NVIDIA's device-plugin chart, not featureplug's: the MIG strategy is a builtin rules file: --set rules.builtin=none|single|mixed"},
		{map[string]any{"nvidiaDriverRoot": "/run/nvidia/driver"}, "nvidiaDriverRoot is a value of NVIDIA's device-plugin chart, not featureplug's: --set driverRoot="},
		{map[string]any{"config": map[string]any{"name": "time-slicing-config"}}, "--set rules.existingConfigMap=<ConfigMap>"},
		{map[string]any{"failOnInitError": false, "gfd": map[string]any{"enabled": true}}, "failOnInitError is a value of NVIDIA's"},
	} {
		_, err := Helm(filepath.Join(manifestsDir(t), "helm", "featureplug"), name, namespace, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "additional properties") {
			t.Errorf("values %v: error %v, want one containing %q", tc.values, err, tc.want)
		}
	}
}

// TestHelmRejectsBadValues checks that values.schema.json turns bad values
// into errors naming the value.
func TestHelmRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		values   map[string]any
		wantText string
	}{
		{map[string]any{"publish": "nodefeatures"}, "publish"},
		{map[string]any{"rules": map[string]any{"builtin": "mixd"}}, "builtin"},
		{map[string]any{"deviceListStrategy": []any{"env"}}, "deviceListStrategy"},
		{map[string]any{"resyncInterval": "hourly"}, "resyncInterval"},
		{map[string]any{"ignoredXIDs": []any{"13"}}, "ignoredXIDs"},
		{map[string]any{"metricsPort": 0}, "metricsPort"},
		{map[string]any{"driverRoot": "run/nvidia/driver"}, "driverRoot"},
		{map[string]any{"sysfsRoot": "/"}, "sysfsRoot"},
		{map[string]any{"replicaPolicy": "spread"}, "replicaPolicy"},
		{map[string]any{"publsh": "file"}, "publsh"},
		{map[string]any{"dra": map[string]any{"enabled": true, "serve": "DRA"}}, "serve"},
		{map[string]any{"dra": map[string]any{"pluginDir": "plugins/gpu.featureplug.io"}}, "pluginDir"},
		{map[string]any{"dra": map[string]any{"deviceClasses": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "x"}, "spec": map[string]any{}}}}}, "deviceClasses"},
	} {
		_, err := Helm(filepath.Join(manifestsDir(t), "helm", "featureplug"), name, namespace, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.wantText) {
			t.Errorf("values %v: error %v, want one naming %s", tc.values, err, tc.wantText)
		}
	}
}

func readChartFile(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(manifestsDir(t), "helm", "featureplug", rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
