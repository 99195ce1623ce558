package render

import (
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
)

// TestOverlaysRenderTheirObjects builds each overlay and checks the set of
// objects and the publishing mode the agent is given.
func TestOverlaysRenderTheirObjects(t *testing.T) {
	common := []string{
		"Namespace " + namespace,
		"ServiceAccount " + name,
		"ClusterRole " + name,
		"ClusterRoleBinding " + name,
		"ConfigMap " + rulesConfigMap,
		"DaemonSet " + name,
	}
	nodeFeature := []string{
		"Role " + name,
		"RoleBinding " + name,
		"ValidatingAdmissionPolicy " + policyName,
		"ValidatingAdmissionPolicyBinding " + policyName,
	}
	for _, tc := range []struct {
		overlay     string
		want        []string
		publish     string
		featuresDir string
	}{
		{overlay: "overlays/nodefeature", want: append(slices.Clone(common), nodeFeature...), publish: "nodefeature"},
		{overlay: "overlays/features-d", want: common, publish: "file",
			featuresDir: "/etc/kubernetes/node-feature-discovery/features.d"},
	} {
		t.Run(tc.overlay, func(t *testing.T) {
			objs := kustomize(t, tc.overlay)
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+" "+o.GetName())
			}
			if !sets.New(got...).Equal(sets.New(tc.want...)) || len(got) != len(tc.want) {
				t.Errorf("objects:\n got %v\nwant %v", sorted(got), sorted(tc.want))
			}
			ds := daemonSet(t, objs)
			c := agent(t, ds)
			if p, _ := flagValue(c.Args, "publish"); p != tc.publish {
				t.Errorf("--publish=%q, want %q (args %v)", p, tc.publish, c.Args)
			}
			file, hasFile := flagValue(c.Args, "features-file")
			if tc.featuresDir == "" {
				if hasFile || volume(ds, "features-d") != nil {
					t.Errorf("features.d is configured though the overlay publishes %s", tc.publish)
				}
				return
			}
			if filepath.Dir(file) != tc.featuresDir {
				t.Errorf("--features-file=%q, want a file in %s", file, tc.featuresDir)
			}
			m := mountAt(c, tc.featuresDir)
			v := volume(ds, "features-d")
			if m == nil || m.ReadOnly || v == nil || v.HostPath == nil || v.HostPath.Path != tc.featuresDir {
				t.Errorf("features.d: want host path %s mounted writable at the same path, got mount %+v volume %+v", tc.featuresDir, m, v)
			}
		})
	}
}

// TestAgentContract checks what the agent relies on in every rendering:
// scheduling, probes, resources, downward API, and that each path flag
// points into a mount of the right host path.
func TestAgentContract(t *testing.T) {
	renderings := map[string]func(t *testing.T) []*unstructured.Unstructured{
		"kustomize overlays/nodefeature": func(t *testing.T) []*unstructured.Unstructured { return kustomize(t, "overlays/nodefeature") },
		"kustomize overlays/features-d":  func(t *testing.T) []*unstructured.Unstructured { return kustomize(t, "overlays/features-d") },
		"kustomize nodefeature + mps + cdi": func(t *testing.T) []*unstructured.Unstructured {
			return composed(t, "overlays/nodefeature", "components/mps", "components/cdi")
		},
		"helm defaults": func(t *testing.T) []*unstructured.Unstructured { return helm(t, nil) },
		"kustomize nodefeature + dra": func(t *testing.T) []*unstructured.Unstructured {
			return composed(t, "overlays/nodefeature", "components/dra")
		},
		// Both mount the CDI spec directory: once, in either order.
		"kustomize nodefeature + cdi + dra": func(t *testing.T) []*unstructured.Unstructured {
			return composed(t, "overlays/nodefeature", "components/cdi", "components/dra")
		},
		"kustomize nodefeature + dra + cdi": func(t *testing.T) []*unstructured.Unstructured {
			return composed(t, "overlays/nodefeature", "components/dra", "components/cdi")
		},
		"helm dra.enabled, serve device-plugin, cdi-cri": func(t *testing.T) []*unstructured.Unstructured {
			return helm(t, map[string]any{
				"dra":                map[string]any{"enabled": true, "serve": "device-plugin"},
				"deviceListStrategy": []any{"cdi-cri"},
			})
		},
		"kustomize nodefeature + driver-container + mig-monitor": func(t *testing.T) []*unstructured.Unstructured {
			return composed(t, "overlays/nodefeature", "components/driver-container", "components/mig-monitor")
		},
		"helm publish=file, mps, cdi, driverRoot": func(t *testing.T) []*unstructured.Unstructured {
			return helm(t, map[string]any{
				"publish": "file", "mps": map[string]any{"enabled": true},
				"deviceListStrategy": []any{"envvar", "cdi-cri"}, "driverRoot": "/run/nvidia/driver",
				"kubeletDir": "/var/lib/k0s/kubelet/device-plugins", "metricsPort": 9400,
			})
		},
	}
	for label, render := range renderings {
		t.Run(label, func(t *testing.T) {
			objs := render(t)
			ds := daemonSet(t, objs)
			pod := &ds.Spec.Template.Spec
			c := agent(t, ds)

			// Any of NFD's labels for an NVIDIA PCI device selects the node.
			var terms []string
			if a := pod.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
					var exprs []string
					for _, e := range term.MatchExpressions {
						exprs = append(exprs, e.Key+" "+string(e.Operator)+" "+strings.Join(e.Values, ","))
					}
					terms = append(terms, strings.Join(exprs, " && "))
				}
			}
			if !slices.Equal(terms, gpuNodeTerms) {
				t.Errorf("required node affinity terms %q, want %q", terms, gpuNodeTerms)
			}
			if len(pod.NodeSelector) != 0 {
				t.Errorf("nodeSelector %v: the affinity alone selects GPU nodes", pod.NodeSelector)
			}
			for _, want := range []string{"nvidia.com/gpu:Exists:NoSchedule", "CriticalAddonsOnly:Exists:"} {
				found := false
				for _, tol := range pod.Tolerations {
					found = found || string(tol.Key)+":"+string(tol.Operator)+":"+string(tol.Effect) == want
				}
				if !found {
					t.Errorf("no toleration %s in %+v", want, pod.Tolerations)
				}
			}
			if pod.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q", pod.PriorityClassName)
			}
			if !has(objs, "ServiceAccount", pod.ServiceAccountName) {
				t.Errorf("serviceAccountName %q is not rendered", pod.ServiceAccountName)
			}
			if len(c.Args) == 0 || c.Args[0] != "run" {
				t.Errorf("args %v do not start with run", c.Args)
			}
			// NVML from the NVIDIA runtime, or, privileged, from a driver root
			// (test/e2e/secure_manifests_test.go checks each privilege).
			privileged := c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
			_, driverRoot := flagValue(c.Args, "driver-root")
			switch {
			case driverRoot && !privileged:
				t.Errorf("--driver-root without privileged: the container would not see the host's /dev/nvidia*")
			case driverRoot && pod.RuntimeClassName != nil:
				t.Errorf("runtimeClassName %s with --driver-root: the driver root replaces the NVIDIA runtime", *pod.RuntimeClassName)
			case !driverRoot && privileged:
				t.Errorf("privileged without --driver-root: the NVIDIA runtime needs no privilege")
			}

			// Probes on the port --metrics-addr listens on.
			addr, _ := flagValue(c.Args, "metrics-addr")
			var port int32
			for _, p := range c.Ports {
				if p.Name == "metrics" {
					port = p.ContainerPort
				}
			}
			if port == 0 || !strings.HasSuffix(addr, ":"+strconv.Itoa(int(port))) {
				t.Errorf("--metrics-addr=%q does not listen on the metrics port %d", addr, port)
			}
			for probe, path := range map[string]string{"readiness": "/readyz", "liveness": "/healthz"} {
				p := c.ReadinessProbe
				if probe == "liveness" {
					p = c.LivenessProbe
				}
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "metrics" {
					t.Errorf("%s probe %+v, want GET %s on port metrics", probe, p, path)
				}
			}

			// Small, bounded resources.
			req, lim := c.Resources.Requests, c.Resources.Limits
			if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() || req.Memory().Cmp(*lim.Memory()) > 0 {
				t.Errorf("resources %+v: want cpu and memory requests and a memory limit at least the request", c.Resources)
			}

			// Downward API.
			env := map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					env[e.Name] = e.ValueFrom.FieldRef.FieldPath
				}
			}
			if env["NODE_NAME"] != "spec.nodeName" || env["POD_NAMESPACE"] != "metadata.namespace" {
				t.Errorf("downward API env %v, want NODE_NAME=spec.nodeName, POD_NAMESPACE=metadata.namespace", env)
			}

			checkPaths(t, objs, ds)
		})
	}
}

// checkPaths checks that every path flag of the agent points into a mount
// of the host path it is about, and that mounts and volumes pair up.
func checkPaths(t *testing.T, objs []*unstructured.Unstructured, ds *appsv1.DaemonSet) {
	t.Helper()
	pod := &ds.Spec.Template.Spec
	c := agent(t, ds)
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
	}
	for _, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			t.Errorf("mount %s at %s has no volume", m.Name, m.MountPath)
		}
		if m.SubPath != "" {
			t.Errorf("mount %s uses subPath %q: ConfigMap updates and symlink swaps would not reach the agent", m.Name, m.SubPath)
		}
		delete(volumes, m.Name)
	}
	for v := range volumes {
		t.Errorf("volume %s is not mounted", v)
	}

	hostPathAt := func(flag, mountPath string, readOnly bool) string {
		t.Helper()
		m := mountAt(c, mountPath)
		if m == nil {
			t.Errorf("--%s needs a mount at %s; mounts: %+v", flag, mountPath, c.VolumeMounts)
			return ""
		}
		if m.ReadOnly != readOnly {
			t.Errorf("mount at %s (for --%s): readOnly=%v, want %v", mountPath, flag, m.ReadOnly, readOnly)
		}
		v := volume(ds, m.Name)
		if v == nil || v.HostPath == nil {
			t.Errorf("mount at %s (for --%s) is not a hostPath volume", mountPath, flag)
			return ""
		}
		return v.HostPath.Path
	}

	// The kubelet dials the socket path the agent registers, so the
	// directory is mounted at its host path.
	if dir, ok := flagValue(c.Args, "kubelet-dir"); !ok {
		t.Errorf("no --kubelet-dir in %v", c.Args)
	} else if hp := hostPathAt("kubelet-dir", dir, false); hp != dir {
		t.Errorf("--kubelet-dir=%s is host path %q", dir, hp)
	}
	// A driver root only where one is configured, read-only.
	if root, ok := flagValue(c.Args, "driver-root"); !ok {
		if mountAt(c, "/host") != nil {
			t.Errorf("/host is mounted without --driver-root")
		}
	} else if root != "/host" {
		t.Errorf("--driver-root=%q, want /host", root)
	} else if m := mountAt(c, root); m == nil || m.MountPropagation == nil || *m.MountPropagation != "HostToContainer" {
		t.Errorf("driver root mount %+v: want HostToContainer propagation", m)
	} else {
		hostPathAt("driver-root", root, true)
	}
	// NUMA nodes come from the container's own /sys.
	if root, ok := flagValue(c.Args, "sysfs-root"); ok {
		t.Errorf("--sysfs-root=%s: the container's /sys shows the host's PCI devices; no host /sys is needed", root)
	}

	// Rules: a ConfigMap mounted as a directory holding the file.
	if file, ok := flagValue(c.Args, "rules"); ok && filepath.IsAbs(file) {
		m := mountAt(c, filepath.Dir(file))
		if m == nil {
			t.Errorf("--rules=%s is not in a mounted directory", file)
		} else if v := volume(ds, m.Name); v == nil || v.ConfigMap == nil {
			t.Errorf("--rules=%s: directory is not a ConfigMap volume", file)
		} else if cm := find(t, objs, "ConfigMap", v.ConfigMap.Name); cm != nil {
			if data, _, _ := unstructured.NestedString(cm.Object, "data", filepath.Base(file)); data == "" {
				t.Errorf("ConfigMap %s has no key %s", cm.GetName(), filepath.Base(file))
			}
		}
	}

	if file, ok := flagValue(c.Args, "features-file"); ok {
		dir := filepath.Dir(file)
		if hp := hostPathAt("features-file", dir, false); hp != dir {
			t.Errorf("--features-file=%s: %s is host path %q", file, dir, hp)
		}
	}
	if root, ok := flagValue(c.Args, "mps-root"); ok {
		if hp := hostPathAt("mps-root", root, false); hp != root {
			t.Errorf("--mps-root=%s is host path %q (Allocate mounts the same path into workloads)", root, hp)
		}
		// The daemons the agent starts share memory with the workloads
		// through /dev/shm, which Allocate mounts from <mps-root>/shm.
		if hp := hostPathAt("mps-root", "/dev/shm", false); hp != root+"/shm" {
			t.Errorf("/dev/shm is host path %q, want %s/shm (the workloads' /dev/shm)", hp, root)
		}
	} else if mountAt(c, "/dev/shm") != nil {
		t.Errorf("/dev/shm is mounted without MPS")
	}
	if pod.HostIPC {
		t.Errorf("hostIPC: MPS shares /dev/shm through <mps-root>/shm instead")
	}
	// DRA: the kubelet dials the registration socket and the DRA socket
	// at the paths the agent names, so both directories are mounted,
	// writable, at their host paths.
	_, dra := flagValue(c.Args, "dra-plugin-dir")
	if dra {
		for _, flag := range []string{"kubelet-registry-dir", "dra-plugin-dir"} {
			if dir, ok := flagValue(c.Args, flag); !ok {
				t.Errorf("DRA without --%s", flag)
			} else if hp := hostPathAt(flag, dir, false); hp != dir {
				t.Errorf("--%s=%s is host path %q", flag, dir, hp)
			}
		}
		if serve, ok := flagValue(c.Args, "serve"); !ok || (serve != "dra" && serve != "device-plugin") {
			t.Errorf("DRA deployed with --serve=%q (present %v), want dra or device-plugin", serve, ok)
		}
	} else {
		if serve, ok := flagValue(c.Args, "serve"); ok && serve == "dra" {
			t.Errorf("--serve=dra without the DRA plugin directory")
		}
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.MountPath, "/var/lib/kubelet/plugins") {
				t.Errorf("%s is mounted without DRA", m.MountPath)
			}
		}
	}
	// CDI: the agent writes the specs into --cdi-spec-dir, a writable
	// mount of the same host path, for a CDI strategy and for DRA (a
	// prepared claim names CDI devices).
	if s, _ := flagValue(c.Args, "device-list-strategy"); strings.Contains(s, "cdi-") || dra {
		if dir, ok := flagValue(c.Args, "cdi-spec-dir"); !ok {
			t.Errorf("a CDI strategy or DRA without --cdi-spec-dir")
		} else if hp := hostPathAt("cdi-spec-dir", dir, false); hp != dir {
			t.Errorf("--cdi-spec-dir=%s is host path %q", dir, hp)
		}
	} else if mountAt(c, "/var/run/cdi") != nil {
		t.Errorf("/var/run/cdi is mounted without a CDI device list strategy or DRA")
	} else if dir, ok := flagValue(c.Args, "cdi-spec-dir"); ok {
		t.Errorf("--cdi-spec-dir=%s without a CDI device list strategy or DRA", dir)
	}
	// Each volume once (components that mount the same directory merge).
	seen := map[string]bool{}
	for _, v := range pod.Volumes {
		if seen[v.Name] {
			t.Errorf("volume %s is there twice", v.Name)
		}
		seen[v.Name] = true
	}
}

// TestRBACIsMinimal checks the agent's rights: NodeFeatures in its
// namespace (and the admission policy's marker), read-only Nodes, Events,
// and nothing else. test/e2e/secure_rbac_test.go shows each is used.
func TestRBACIsMinimal(t *testing.T) {
	objs := kustomize(t, "overlays/nodefeature")
	type rule struct{ groups, resources, verbs []string }
	rulesOf := func(kind, objName string) []rule {
		o := find(t, objs, kind, objName)
		raw, _, _ := unstructured.NestedSlice(o.Object, "rules")
		var out []rule
		for _, r := range raw {
			m := r.(map[string]any)
			str := func(k string) []string {
				v, _, _ := unstructured.NestedStringSlice(m, k)
				return v
			}
			out = append(out, rule{str("apiGroups"), str("resources"), str("verbs")})
		}
		return out
	}
	want := map[string][]rule{
		"Role": {
			{[]string{"nfd.k8s-sigs.io"}, []string{"nodefeatures"}, []string{"get", "create", "patch"}},
			{[]string{""}, []string{"pods"}, []string{"get"}},
			{[]string{"featureplug.io"}, []string{"agents"}, []string{"publish-own-nodefeature"}},
		},
		"ClusterRole": {
			{[]string{""}, []string{"nodes"}, []string{"get", "list", "watch"}},
			{[]string{""}, []string{"events"}, []string{"create", "patch"}},
		},
	}
	for kind, w := range want {
		got := rulesOf(kind, name)
		if len(got) != len(w) {
			t.Errorf("%s %s: %d rules, want %d: %+v", kind, name, len(got), len(w), got)
			continue
		}
		for i := range w {
			if !slices.Equal(got[i].groups, w[i].groups) || !slices.Equal(got[i].resources, w[i].resources) ||
				!slices.Equal(got[i].verbs, w[i].verbs) {
				t.Errorf("%s %s rule %d: %+v, want %+v", kind, name, i, got[i], w[i])
			}
		}
	}
	role := find(t, objs, "Role", name)
	if role.GetNamespace() != namespace {
		t.Errorf("Role in namespace %q, want %q", role.GetNamespace(), namespace)
	}
	for _, b := range []struct{ kind, roleKind string }{{"RoleBinding", "Role"}, {"ClusterRoleBinding", "ClusterRole"}} {
		o := find(t, objs, b.kind, name)
		ref, _, _ := unstructured.NestedStringMap(o.Object, "roleRef")
		if ref["kind"] != b.roleKind || ref["name"] != name {
			t.Errorf("%s roleRef %v, want %s %s", b.kind, ref, b.roleKind, name)
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if len(subjects) != 1 {
			t.Fatalf("%s: %d subjects, want the agent's service account only", b.kind, len(subjects))
		}
		s := subjects[0].(map[string]any)
		if s["kind"] != "ServiceAccount" || s["name"] != name || s["namespace"] != namespace {
			t.Errorf("%s subject %v, want ServiceAccount %s/%s", b.kind, s, namespace, name)
		}
	}
}

// TestAdmissionPolicyNamesNoOne checks that the policy recognizes the agent
// by its Role's marker right, never by a service-account name or namespace
// (a renaming that forgot the policy would silently switch it off), that
// the Role carries that right, and that its binding denies.
func TestAdmissionPolicyNamesNoOne(t *testing.T) {
	for label, objs := range map[string][]*unstructured.Unstructured{
		"kustomize": kustomize(t, "overlays/nodefeature"),
		"helm":      helm(t, nil),
		"helm in another namespace": func() []*unstructured.Unstructured {
			o, err := Helm(filepath.Join(manifestsDir(t), "helm", "featureplug"), "gpu", "gpu-system",
				map[string]any{"serviceAccount": map[string]any{"name": "agent"}, "fullnameOverride": "featureplug"})
			if err != nil {
				t.Fatal(err)
			}
			return o
		}(),
	} {
		t.Run(label, func(t *testing.T) {
			policy := find(t, objs, "ValidatingAdmissionPolicy", policyName)
			conds, _, _ := unstructured.NestedSlice(policy.Object, "spec", "matchConditions")
			var exprs []string
			for _, c := range conds {
				exprs = append(exprs, c.(map[string]any)["expression"].(string))
			}
			joined := strings.Join(exprs, "\n")
			if !strings.Contains(joined, "check('publish-own-nodefeature').allowed()") {
				t.Errorf("matchConditions %q do not ask the authorizer for the marker right", exprs)
			}
			if strings.Contains(joined, "system:serviceaccount") || strings.Contains(joined, "username") {
				t.Errorf("matchConditions %q name a user", exprs)
			}
			var role *unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == "Role" {
					role = o
				}
			}
			if role == nil {
				t.Fatal("no Role")
			}
			rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
			marker := false
			for _, r := range rules {
				verbs, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "verbs")
				marker = marker || slices.Contains(verbs, "publish-own-nodefeature")
			}
			if !marker {
				t.Errorf("Role %s lacks the marker right: %v", role.GetName(), rules)
			}
			binding := find(t, objs, "ValidatingAdmissionPolicyBinding", policyName)
			ref, _, _ := unstructured.NestedString(binding.Object, "spec", "policyName")
			actions, _, _ := unstructured.NestedStringSlice(binding.Object, "spec", "validationActions")
			if ref != policyName || !slices.Equal(actions, []string{"Deny"}) {
				t.Errorf("binding policyName %q validationActions %v, want %s [Deny]", ref, actions, policyName)
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestUpdateStrategy: the DaemonSet's rolling update starts the new agent
// beside the old one (maxSurge 1, maxUnavailable 0), a device-plugin (and
// DRA) handover with no gap, except with MPS, whose control daemons have
// one pipe directory per resource: one agent at a time there. Helm renders the
// same (TestHelmMatchesKustomize) and keeps a strategy set in its values.
func TestUpdateStrategy(t *testing.T) {
	surge := map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": int64(0), "maxSurge": int64(1)}}
	oneAtATime := map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": int64(1), "maxSurge": int64(0)}}
	for _, tc := range []struct {
		name string
		objs func(t *testing.T) []*unstructured.Unstructured
		want map[string]any
	}{
		{"kustomize overlays/nodefeature", func(t *testing.T) []*unstructured.Unstructured { return kustomize(t, "overlays/nodefeature") }, surge},
		{"kustomize nodefeature + mps", func(t *testing.T) []*unstructured.Unstructured {
			return composed(t, "overlays/nodefeature", "components/mps")
		}, oneAtATime},
		{"kustomize nodefeature + dra", func(t *testing.T) []*unstructured.Unstructured {
			return composed(t, "overlays/nodefeature", "components/dra")
		}, surge},
		{"helm defaults", func(t *testing.T) []*unstructured.Unstructured { return helm(t, nil) }, surge},
		{"helm updateStrategy OnDelete", func(t *testing.T) []*unstructured.Unstructured {
			return helm(t, map[string]any{"updateStrategy": map[string]any{"type": "OnDelete"}, "mps": map[string]any{"enabled": true}})
		}, map[string]any{"type": "OnDelete"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, o := range tc.objs(t) {
				if o.GetKind() != "DaemonSet" || o.GetName() != "featureplug" {
					continue
				}
				got, _, err := unstructured.NestedMap(o.Object, "spec", "updateStrategy")
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(normalizeInts(got), tc.want) {
					t.Errorf("updateStrategy %v, want %v", got, tc.want)
				}
				return
			}
			t.Fatal("no featureplug DaemonSet")
		})
	}
}

// normalizeInts makes every number of a decoded map an int64, whichever
// decoder made it.
func normalizeInts(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case map[string]any:
			out[k] = normalizeInts(x)
		case float64:
			out[k] = int64(x)
		case int:
			out[k] = int64(x)
		default:
			out[k] = v
		}
	}
	return out
}
