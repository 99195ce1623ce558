package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/featureplug/featureplug/test/manifests"
	"github.com/featureplug/featureplug/test/manifests/render"
)

// secureDefaultHostPaths are the only host paths of a default deployment:
// the kubelet's device-plugin sockets and the agent's state, both writable.
var secureDefaultHostPaths = []string{"hostPath:/var/lib/featureplug:rw", "hostPath:/var/lib/kubelet/device-plugins:rw"}

// TestSecureDefaultsUnprivileged checks the default renderings of both
// overlays and of the chart: no privileged container, no added capability
// (all dropped), no privilege escalation, no host namespace, a read-only
// root, seccomp RuntimeDefault, NVML from the NVIDIA runtime as the
// default runtime (no runtimeClassName, as in NVIDIA's chart), and only the
// host paths the agent needs.
func TestSecureDefaultsUnprivileged(t *testing.T) {
	for label, tc := range map[string]struct {
		objs      func(t *testing.T) []*unstructured.Unstructured
		hostPaths []string
	}{
		"kustomize overlays/nodefeature": {objs: func(t *testing.T) []*unstructured.Unstructured { return secureKustomize(t, "overlays/nodefeature") }},
		"kustomize overlays/features-d": {
			objs:      func(t *testing.T) []*unstructured.Unstructured { return secureKustomize(t, "overlays/features-d") },
			hostPaths: []string{"hostPath:/etc/kubernetes/node-feature-discovery/features.d:rw"},
		},
		"helm defaults": {objs: func(t *testing.T) []*unstructured.Unstructured { return secureHelm(t, "featureplug", nil) }},
		"helm publish=file": {
			objs: func(t *testing.T) []*unstructured.Unstructured {
				return secureHelm(t, "featureplug", map[string]any{"publish": "file"})
			},
			hostPaths: []string{"hostPath:/etc/kubernetes/node-feature-discovery/features.d:rw"},
		},
	} {
		t.Run(label, func(t *testing.T) {
			ds := secureDaemonSet(t, tc.objs(t))
			pod := ds.Spec.Template.Spec
			if pod.HostIPC || pod.HostPID || pod.HostNetwork {
				t.Errorf("host namespaces: hostIPC %v, hostPID %v, hostNetwork %v; want none", pod.HostIPC, pod.HostPID, pod.HostNetwork)
			}
			if pod.RuntimeClassName != nil {
				t.Errorf("runtimeClassName %s, want none (NVML from the default runtime, as NVIDIA's chart does)", *pod.RuntimeClassName)
			}
			if len(pod.InitContainers) != 0 || len(pod.Containers) != 1 {
				t.Errorf("%d init containers and %d containers, want the agent alone", len(pod.InitContainers), len(pod.Containers))
			}
			for _, c := range pod.Containers {
				sc := c.SecurityContext
				if sc == nil {
					t.Fatalf("container %s has no security context", c.Name)
				}
				if sc.Privileged != nil && *sc.Privileged {
					t.Errorf("container %s is privileged", c.Name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("container %s: allowPrivilegeEscalation %v, want false", c.Name, sc.AllowPrivilegeEscalation)
				}
				if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
					t.Errorf("container %s: capabilities %+v, want ALL dropped and none added", c.Name, sc.Capabilities)
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("container %s: the root filesystem is writable", c.Name)
				}
				if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("container %s: seccomp profile %+v, want RuntimeDefault", c.Name, sc.SeccompProfile)
				}
				if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
					t.Errorf("container %s: procMount %s", c.Name, *sc.ProcMount)
				}
			}
			var hostPaths []string
			for p := range secureProfile(ds) {
				if strings.HasPrefix(p, "hostPath:") {
					hostPaths = append(hostPaths, p)
				}
			}
			want := append(slices.Clone(secureDefaultHostPaths), tc.hostPaths...)
			slices.Sort(hostPaths)
			slices.Sort(want)
			if !slices.Equal(hostPaths, want) {
				t.Errorf("host paths %v, want %v", hostPaths, want)
			}
		})
	}
}

// TestSecureOptionsAddExactlyTheirPrivileges renders each optional
// component (over overlays/nodefeature) and each chart value that needs
// more than the defaults, and compares the agent's privileges with the
// default rendering's (pod privileges and RBAC rights): each adds
// exactly, and takes away exactly, what docs/deployment.md's privilege
// table says.
func TestSecureOptionsAddExactlyTheirPrivileges(t *testing.T) {
	mps := secureChange{
		added:   []string{"hostPath:/run/featureplug/mps:rw", "hostPath:/run/featureplug/mps/shm:rw", "env:NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
		removed: []string{"env:NVIDIA_DRIVER_CAPABILITIES=utility"},
	}
	cdi := secureChange{added: []string{"hostPath:/var/run/cdi:rw"}}
	mig := secureChange{added: []string{"capability:SYS_ADMIN", "allowPrivilegeEscalation", "env:NVIDIA_MIG_MONITOR_DEVICES=all"}}
	dra := secureChange{added: []string{
		"hostPath:/var/run/cdi:rw", "hostPath:/var/lib/kubelet/plugins_registry:rw", "hostPath:/var/lib/kubelet/plugins/gpu.featureplug.io:rw",
		"rbac:" + secureRight("resource.k8s.io", "resourceslices", "", "list"),
		"rbac:" + secureRight("resource.k8s.io", "resourceslices", "", "watch"),
		"rbac:" + secureRight("resource.k8s.io", "resourceslices", "", "create"),
		"rbac:" + secureRight("resource.k8s.io", "resourceslices", "", "update"),
		"rbac:" + secureRight("resource.k8s.io", "resourceslices", "", "delete"),
		"rbac:" + secureRight("resource.k8s.io", "resourceclaims", "", "get"),
		"rbac:" + secureRight("resource.k8s.io", "resourceclaims", "status", "patch"),
		"rbac:" + secureRight("resource.k8s.io", "resourceclaims", "driver", "associated-node:patch") + " named gpu.featureplug.io",
	}}
	driverRoot := func(path string) secureChange {
		return secureChange{added: []string{"privileged", "allowPrivilegeEscalation", "hostPath:" + path + ":ro"}}
	}
	runtimeClass := secureChange{added: []string{"runtimeClass:nvidia"}}
	kustomizeBase := secureOptionProfile(t, secureKustomize(t, "overlays/nodefeature"))
	helmBase := secureOptionProfile(t, secureHelm(t, "featureplug", nil))
	for _, tc := range []struct {
		label  string
		objs   func(t *testing.T) []*unstructured.Unstructured
		helm   bool
		change secureChange
	}{
		{label: "components/mps", objs: secureComponent("mps"), change: mps},
		{label: "components/cdi", objs: secureComponent("cdi"), change: cdi},
		{label: "components/mig-monitor", objs: secureComponent("mig-monitor"), change: mig},
		{label: "components/driver-root", objs: secureComponent("driver-root"), change: driverRoot("/")},
		{label: "components/driver-container", objs: secureComponent("driver-container"), change: driverRoot("/run/nvidia/driver")},
		{label: "components/dra", objs: secureComponent("dra"), change: dra},
		{label: "components/runtimeclass", objs: secureComponent("runtimeclass"), change: runtimeClass},
		{label: "helm runtimeClassName=nvidia", helm: true, objs: secureHelmWith(map[string]any{"runtimeClassName": "nvidia"}), change: runtimeClass},
		{label: "helm mps.enabled", helm: true, objs: secureHelmWith(map[string]any{"mps": map[string]any{"enabled": true}}), change: mps},
		{label: "helm deviceListStrategy=cdi-cri", helm: true, objs: secureHelmWith(map[string]any{"deviceListStrategy": []any{"cdi-cri"}}), change: cdi},
		{label: "helm migMonitorDevices", helm: true, objs: secureHelmWith(map[string]any{"migMonitorDevices": true}), change: mig},
		{label: "helm driverRoot=/", helm: true, objs: secureHelmWith(map[string]any{"driverRoot": "/"}), change: driverRoot("/")},
		{label: "helm driverRoot=/run/nvidia/driver", helm: true,
			objs: secureHelmWith(map[string]any{"driverRoot": "/run/nvidia/driver"}), change: driverRoot("/run/nvidia/driver")},
		{label: "helm dra.enabled", helm: true, objs: secureHelmWith(map[string]any{"dra": map[string]any{"enabled": true}}), change: dra},
	} {
		t.Run(tc.label, func(t *testing.T) {
			base := kustomizeBase
			if tc.helm {
				base = helmBase
			}
			got := secureOptionProfile(t, tc.objs(t))
			added, removed := sets.List(got.Difference(base)), sets.List(base.Difference(got))
			if want := sets.List(sets.New(tc.change.added...)); !slices.Equal(added, want) {
				t.Errorf("adds %v, want exactly %v", added, want)
			}
			if want := sets.List(sets.New(tc.change.removed...)); !slices.Equal(removed, want) {
				t.Errorf("takes away %v, want exactly %v", removed, want)
			}
		})
	}
}

// secureChange is what an option changes in the agent's privileges.
type secureChange struct{ added, removed []string }

// secureOptionProfile is what a rendering grants the agent: its pod's
// privileges (secureProfile) and its RBAC rights, each as
// "rbac:<verb> <resource>.<group>", from every Role and ClusterRole of
// the rendering.
func secureOptionProfile(t *testing.T, objs []*unstructured.Unstructured) sets.Set[string] {
	t.Helper()
	p := secureProfile(secureDaemonSet(t, objs))
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			m, _ := r.(map[string]any)
			str := func(k string) []string {
				v, _, _ := unstructured.NestedStringSlice(m, k)
				return v
			}
			named := ""
			if names := str("resourceNames"); len(names) > 0 {
				named = " named " + strings.Join(names, ",")
			}
			for _, g := range str("apiGroups") {
				for _, res := range str("resources") {
					resource, sub, _ := strings.Cut(res, "/")
					for _, v := range str("verbs") {
						p.Insert("rbac:" + secureRight(g, resource, sub, v) + named)
					}
				}
			}
		}
	}
	return p
}

// secureProfile lists what a rendering grants the agent's pod: host
// namespaces, privileged, privilege escalation, added capabilities (and
// capabilities not dropped), a writable root, seccomp other than
// RuntimeDefault, its RuntimeClass, host paths with their access, and what
// it asks of the NVIDIA runtime (NVIDIA_* variables).
func secureProfile(ds *appsv1.DaemonSet) sets.Set[string] {
	p := sets.New[string]()
	pod := ds.Spec.Template.Spec
	for name, on := range map[string]bool{"hostIPC": pod.HostIPC, "hostPID": pod.HostPID, "hostNetwork": pod.HostNetwork} {
		if on {
			p.Insert(name)
		}
	}
	if pod.RuntimeClassName != nil {
		p.Insert("runtimeClass:" + *pod.RuntimeClassName)
	}
	podSeccomp := pod.SecurityContext != nil && pod.SecurityContext.SeccompProfile != nil &&
		pod.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if sc.Privileged != nil && *sc.Privileged {
			p.Insert("privileged")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			p.Insert("allowPrivilegeEscalation")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			p.Insert("capabilities-not-dropped")
		}
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				p.Insert("capability:" + string(c))
			}
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			p.Insert("writable-root")
		}
		if !(podSeccomp || sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault) {
			p.Insert("seccomp-not-runtime-default")
		}
		for _, m := range c.VolumeMounts {
			if path, ok := hostPaths[m.Name]; ok {
				access := "rw"
				if m.ReadOnly {
					access = "ro"
				}
				p.Insert("hostPath:" + path + ":" + access)
			}
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "NVIDIA_") {
				p.Insert("env:" + e.Name + "=" + e.Value)
			}
		}
	}
	return p
}

// TestSecureHelmLint runs Helm's own lint rules (`helm lint --strict`:
// Chart.yaml, values and their schema, every template rendered and parsed)
// over the chart with its defaults and with every option that changes
// which objects or privileges it renders. Warnings fail.
func TestSecureHelmLint(t *testing.T) {
	chart := filepath.Join(secureManifestsDir(t), "helm", "featureplug")
	kube := &chartutil.KubeVersion{Version: render.KubeVersion, Major: "1", Minor: "37"}
	for label, values := range map[string]map[string]any{
		"defaults":  nil,
		"overrides": {"nameOverride": "gpu", "fullnameOverride": "gpu-agent", "namespaceOverride": "gpu-system", "createNamespace": true},
		"options": {"publish": "file", "mps": map[string]any{"enabled": true}, "deviceListStrategy": []any{"cdi-annotations"},
			"migMonitorDevices": true, "driverRoot": "/run/nvidia/driver", "rules": map[string]any{"builtin": "single"}},
		"dra": {"dra": map[string]any{"enabled": true, "deviceClasses": []any{map[string]any{
			"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": map[string]any{"name": "a100.example.com"},
			"spec": map[string]any{"extendedResourceName": "example.com/a100"}}}}},
	} {
		t.Run(label, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chart, values, "featureplug", kube)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestSecureHelmConventions checks Helm's standard labels on every object,
// selectors that include the release, so two releases never select each
// other's pods, and nameOverride, fullnameOverride and namespaceOverride.
func TestSecureHelmConventions(t *testing.T) {
	chartVersion, appVersion := secureChartVersions(t)
	for _, tc := range []struct {
		release, namespace string
		values             map[string]any
		wantName, wantFull string
		wantNS             string
	}{
		{release: "featureplug", namespace: "featureplug", wantName: "featureplug", wantFull: "featureplug", wantNS: "featureplug"},
		{release: "gpu", namespace: "kube-system", wantName: "featureplug", wantFull: "gpu-featureplug", wantNS: "kube-system"},
		{release: "gpu", namespace: "default", values: map[string]any{"nameOverride": "gpu-agent"},
			wantName: "gpu-agent", wantFull: "gpu-gpu-agent", wantNS: "default"},
		{release: "gpu", namespace: "default", values: map[string]any{"fullnameOverride": "agents", "namespaceOverride": "gpu-system"},
			wantName: "featureplug", wantFull: "agents", wantNS: "gpu-system"},
	} {
		t.Run(fmt.Sprintf("%s in %s with %v", tc.release, tc.namespace, tc.values), func(t *testing.T) {
			objs := secureHelmIn(t, tc.release, tc.namespace, tc.values)
			want := map[string]string{
				"helm.sh/chart":                "featureplug-" + chartVersion,
				"app.kubernetes.io/name":       tc.wantName,
				"app.kubernetes.io/instance":   tc.release,
				"app.kubernetes.io/version":    appVersion,
				"app.kubernetes.io/managed-by": "Helm",
			}
			for _, o := range objs {
				key := manifests.KeyOf(o)
				for k, v := range want {
					if got := o.GetLabels()[k]; got != v {
						t.Errorf("%s: label %s=%q, want %q", key, k, got, v)
					}
				}
				if o.GetKind() != "ConfigMap" && !strings.HasPrefix(o.GetName(), tc.wantFull) {
					t.Errorf("%s: name does not start with the full name %q", key, tc.wantFull)
				}
				if o.GetNamespace() != "" && o.GetNamespace() != tc.wantNS {
					t.Errorf("%s: namespace %q, want %q", key, o.GetNamespace(), tc.wantNS)
				}
			}
			ds := secureDaemonSet(t, objs)
			sel := ds.Spec.Selector.MatchLabels
			if sel["app.kubernetes.io/name"] != tc.wantName || sel["app.kubernetes.io/instance"] != tc.release {
				t.Errorf("selector %v, want the name %q and the instance %q", sel, tc.wantName, tc.release)
			}
			if !labels.SelectorFromSet(sel).Matches(labels.Set(ds.Spec.Template.Labels)) {
				t.Errorf("selector %v does not match the pod template's labels %v", sel, ds.Spec.Template.Labels)
			}
			for _, o := range objs {
				if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
					continue
				}
				subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
				for _, s := range subjects {
					if ns := s.(map[string]any)["namespace"]; ns != tc.wantNS {
						t.Errorf("%s: subject in namespace %v, want %s", manifests.KeyOf(o), ns, tc.wantNS)
					}
				}
			}
		})
	}
	// Two releases in one namespace: neither DaemonSet selects the other's pods.
	a := secureDaemonSet(t, secureHelmIn(t, "gpu-a", "gpu", nil))
	b := secureDaemonSet(t, secureHelmIn(t, "gpu-b", "gpu", nil))
	if labels.SelectorFromSet(a.Spec.Selector.MatchLabels).Matches(labels.Set(b.Spec.Template.Labels)) ||
		labels.SelectorFromSet(b.Spec.Selector.MatchLabels).Matches(labels.Set(a.Spec.Template.Labels)) {
		t.Errorf("releases gpu-a and gpu-b select each other's pods: %v, %v", a.Spec.Selector.MatchLabels, b.Spec.Selector.MatchLabels)
	}
}

// TestSecureImageReference checks that the manifests run the image `make
// image` builds: the Makefile tags <IMAGE_REPO>:<the chart's appVersion>.
func TestSecureImageReference(t *testing.T) {
	_, appVersion := secureChartVersions(t)
	want := "ghcr.io/featureplug/featureplug:" + appVersion
	for label, objs := range map[string][]*unstructured.Unstructured{
		"kustomize overlays/nodefeature": secureKustomize(t, "overlays/nodefeature"),
		"kustomize overlays/features-d":  secureKustomize(t, "overlays/features-d"),
		"helm defaults":                  secureHelm(t, "featureplug", nil),
	} {
		if got := secureDaemonSet(t, objs).Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("%s: image %s, want %s (what make image builds)", label, got, want)
		}
	}
	makefile := secureReadRoot(t, "Makefile")
	for _, line := range []string{
		"IMAGE_REPO ?= ghcr.io/featureplug/featureplug",
		"IMAGE_TAG  ?= $(shell sed -n 's/^appVersion: *//p' manifests/helm/featureplug/Chart.yaml)",
	} {
		if !strings.Contains(makefile, line) {
			t.Errorf("the Makefile's image target lacks %q", line)
		}
	}
	dockerfile := secureReadRoot(t, "Dockerfile")
	for _, want := range []string{"CGO_ENABLED=1", "FROM gcr.io/distroless/base-debian12", `ENTRYPOINT ["/usr/bin/featureplug"]`} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

func secureManifestsDir(t *testing.T) string {
	t.Helper()
	dir, err := manifests.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func secureReadRoot(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(filepath.Dir(secureManifestsDir(t)), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func secureKustomize(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render.Kustomize(filepath.Join(secureManifestsDir(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// secureComponent renders overlays/nodefeature with one component.
func secureComponent(name string) func(t *testing.T) []*unstructured.Unstructured {
	return func(t *testing.T) []*unstructured.Unstructured {
		t.Helper()
		dir := secureManifestsDir(t)
		objs, err := render.KustomizeComposed(t.TempDir(), []string{filepath.Join(dir, "overlays", "nodefeature")},
			[]string{filepath.Join(dir, "components", name)})
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
}

func secureHelmIn(t *testing.T, release, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render.Helm(filepath.Join(secureManifestsDir(t), "helm", "featureplug"), release, namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func secureHelm(t *testing.T, release string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	return secureHelmIn(t, release, "featureplug", values)
}

func secureHelmWith(values map[string]any) func(t *testing.T) []*unstructured.Unstructured {
	return func(t *testing.T) []*unstructured.Unstructured { return secureHelm(t, "featureplug", values) }
}

// secureDaemonSet returns the rendering's one DaemonSet, typed.
func secureDaemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(secureOnly(t, objs, "DaemonSet").Object, &ds, true); err != nil {
		t.Fatal(err)
	}
	return &ds
}

// secureChartVersions returns the chart's version and appVersion.
func secureChartVersions(t *testing.T) (version, appVersion string) {
	t.Helper()
	meta, err := chartutil.LoadChartfile(filepath.Join(secureManifestsDir(t), "helm", "featureplug", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return meta.Version, meta.AppVersion
}
