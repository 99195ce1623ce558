package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/draclass"
	"github.com/featureplug/featureplug/rules/plan"
)

// serve adds a Node and its NodeFeature made from inv, annotated as an
// agent running rulesName (a builtin or a path) with --serve def annotates
// it: the digest of the rules and what their plan serves.
func (r *clusterFakeReader) serve(t testing.TB, name string, inv *discovery.Inventory, nodeLabels map[string]string, rulesName string, def plan.Serve) {
	t.Helper()
	cr, err := loadRulesFile(rulesName)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cr.rs.Plan(inv, nodeLabels)
	if err != nil {
		t.Fatal(err)
	}
	r.add(t, name, inv, nodeLabels, cr.digest)
	r.features[len(r.features)-1].Annotations[labeler.AnnotationResources] = labeler.NewServed(p, def).String()
}

// runDiff runs `featureplug rules diff ARGS` over r.
func runDiff(t testing.TB, r *clusterFakeReader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := newRulesDiffCommandWith(func(*clusterFlags) (clusterReader, error) { return r, nil })
	out, errOut, err := runCommand(cmd, args...)
	return out, errOut, exitCode(err)
}

// diffRulesHeader starts a rules file.
const diffRulesHeader = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"

// diffTestRules writes a rules file (diffRulesHeader then body) and
// returns its path.
func diffTestRules(t testing.TB, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(diffRulesHeader+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// diffJSON runs `rules diff -o json ARGS` over r, checks that it prints
// exactly one object whose exit code and status are the command's, with an
// error exactly when it fails, and returns it.
func diffJSON(t testing.TB, r *clusterFakeReader, wantCode int, args ...string) *diffReport {
	t.Helper()
	out, _, code := runDiff(t, r, append([]string{"-o", "json"}, args...)...)
	var rep diffReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("rules diff %q: stdout is not a report: %v\n%s", args, err, out)
	}
	if dec.More() {
		t.Errorf("rules diff %q: more than one object:\n%s", args, out)
	}
	if code != wantCode || rep.ExitCode != code || rep.Status != diffStatus[code] || (rep.Error != "") != (code != 0) {
		t.Fatalf("rules diff %q: exit %d, want %d; report exitCode %d, status %q, error %q", args, code, wantCode, rep.ExitCode, rep.Status, rep.Error)
	}
	return &rep
}

// group returns the group of a node.
func (rep *diffReport) groupOf(t testing.TB, node string) *diffGroup {
	t.Helper()
	for i := range rep.Groups {
		if slices.Contains(rep.Groups[i].Nodes, node) {
			return &rep.Groups[i]
		}
	}
	t.Fatalf("no group has node %s: %s", node, diffDump(rep))
	return nil
}

func diffDump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// diffOps lists a group's changes as "op resource" (with "!" for a
// blocking loss and "~" for an allowed one).
func diffOps(g *diffGroup) []string {
	var out []string
	for _, c := range g.Changes {
		s := c.Op + " " + c.Resource
		switch {
		case c.Blocking:
			s += " !"
		case c.Allowed:
			s += " ~"
		}
		out = append(out, s)
	}
	return out
}

// diffTestNodes is a small cluster: two DGX A100 and a DGX H100 whose
// agents serve the builtin "mixed" rules, a workstation whose agent
// records counts only (an earlier release), and a CPU node.
func diffTestNodes(t testing.TB) *clusterFakeReader {
	t.Helper()
	r := &clusterFakeReader{}
	a100 := explainTestInventory(t, "dgx-a100")
	r.serve(t, "a100-1", a100, nil, "mixed", plan.ServeDevicePlugin)
	r.serve(t, "a100-2", a100, nil, "mixed", plan.ServeDevicePlugin)
	r.serve(t, "h100", explainTestInventory(t, "dgx-h100"), nil, "mixed", plan.ServeDevicePlugin)
	r.add(t, "ws", explainTestInventory(t, "workstation"), nil, "")
	r.features[len(r.features)-1].Annotations = map[string]string{labeler.AnnotationResources: "nvidia.com/gpu=1"}
	r.nodes = append(r.nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}})
	return r
}

// TestRulesDiffServedBaseline: the baseline is what each node serves, so
// an edit that moves devices to other names is a loss there, whatever the
// ConfigMap says; devices are structured, nodes without an agent listed
// apart.
func TestRulesDiffServedBaseline(t *testing.T) {
	r := diffTestNodes(t)
	rep := diffJSON(t, r, diffExitBlocked, "--rules", explainEditRules)
	if rep.Baseline != "served" || rep.Nodes != 5 || rep.BlockedNodes != 2 || !reflect.DeepEqual(rep.WithoutAgent, []string{"cpu"}) {
		t.Errorf("report: %s", diffDump(rep))
	}
	a100 := rep.groupOf(t, "a100-1")
	if want := []string{"added example.com/a100-40gb", "removed nvidia.com/gpu !", "removed nvidia.com/mig-1g.5gb !"}; !reflect.DeepEqual(diffOps(a100), want) || !a100.Blocked {
		t.Errorf("DGX A100: changes %q, blocked %v; want %q, blocked", diffOps(a100), a100.Blocked, want)
	}
	if !reflect.DeepEqual(a100.Nodes, []string{"a100-1", "a100-2"}) || len(a100.Unclaimed) != 6 {
		t.Fatalf("DGX A100 group: %s", diffDump(a100))
	}
	inv := explainTestInventory(t, "dgx-a100")
	want := diffDevice{Index: "0:2", Kind: plan.DeviceMIG, Profile: "1g.5gb", Description: "GPU 0 MIG 2 (1g.5gb)", Was: "nvidia.com/mig-1g.5gb",
		UUIDs: map[string]string{"a100-1": inv.GPUs[0].MIGDevices[2].UUID, "a100-2": inv.GPUs[0].MIGDevices[2].UUID}}
	if !reflect.DeepEqual(a100.Unclaimed[0], want) {
		t.Errorf("first unclaimed device %+v, want %+v", a100.Unclaimed[0], want)
	}
	h100 := rep.groupOf(t, "h100")
	if len(h100.Changes) != 1 || h100.Blocked {
		t.Fatalf("DGX H100: %s", diffDump(h100))
	}
	if c := h100.Changes[0]; c.Op != opSharingChanged || c.Loss || *c.From != (diffResource{Devices: 8, Capacity: 8, Sharing: "none", Serve: plan.ServeDevicePlugin}) ||
		*c.To != (diffResource{Devices: 8, Capacity: 16, Sharing: "time-slicing x2", Serve: plan.ServeDevicePlugin}) {
		t.Errorf("DGX H100 change %s", diffDump(c))
	}
	ws := rep.groupOf(t, "ws")
	if len(ws.Changes) != 0 || len(ws.Warnings) != 1 || !strings.Contains(ws.Warnings[0], "records device counts only") {
		t.Errorf("workstation with a counts-only annotation: %s", diffDump(ws))
	}

	// Everything renamed: every node that serves loses it.
	renamed := diffTestRules(t, "renamed.yaml", "- name: gpu\n  devices: gpu\n  resource: example.com/gpu\n- name: mig\n  devices: mig\n  resource: example.com/mig\n")
	rep = diffJSON(t, r, diffExitBlocked, "--rules", renamed)
	if g := rep.groupOf(t, "h100"); !reflect.DeepEqual(diffOps(g), []string{"added example.com/gpu", "removed nvidia.com/gpu !"}) {
		t.Errorf("DGX H100 renamed: %q", diffOps(g))
	}
	if g := rep.groupOf(t, "ws"); !reflect.DeepEqual(diffOps(g), []string{"added example.com/gpu", "removed nvidia.com/gpu !"}) || g.Changes[0].To.Sharing != "" {
		t.Errorf("workstation renamed: %s", diffDump(g))
	}
	if rep.BlockedNodes != 4 {
		t.Errorf("%d nodes blocked, want 4", rep.BlockedNodes)
	}

	out, _, _ := runDiff(t, r, "--rules", explainEditRules)
	for _, line := range []string{
		"Baseline:  what each node serves (its NodeFeature's featureplug.io/resources)\n",
		"5 nodes: 4 compared in 3 outcomes, 1 without an agent; 2 blocked\n",
		"a100-1, a100-2 (2 nodes)\n  runs      other rules (builtin:mixed)\n  + example.com/a100-40gb: 4 devices\n" +
			"  - nvidia.com/gpu: 4 devices  [loss: blocks]\n  - nvidia.com/mig-1g.5gb: 6 devices  [loss: blocks]\n" +
			"  no resource  GPU 0 MIG 2 (1g.5gb): was nvidia.com/mig-1g.5gb\n",
		"  no resource  and 2 more (-o json lists every device)\n  BLOCKED\n",
		"h100 (1 node)\n  runs      other rules (builtin:mixed)\n  ~ nvidia.com/gpu: sharing none -> time-slicing x2 (8 devices)\n\n",
		"ws (1 node)\n  runs      unknown rules (the agent records no digest)\n  warning   its agent records device counts only",
		"Without an agent (1 node): cpu\n",
		"Result: blocked (exit 1)\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("table lacks %q:\n%s", line, out)
		}
	}
}

// TestRulesDiffStaleConfigMap: with the proposed rules already in the
// ConfigMap while the agents still run the previous ones, the diff still
// shows the loss, and names the nodes that do not run the ConfigMap.
func TestRulesDiffStaleConfigMap(t *testing.T) {
	r := diffTestNodes(t)
	edit, err := os.ReadFile(explainEditRules)
	if err != nil {
		t.Fatal(err)
	}
	r.configMaps = []corev1.ConfigMap{{
		ObjectMeta: metav1.ObjectMeta{Namespace: defaultRulesNamespace, Name: defaultRulesConfigMap},
		Data:       map[string]string{defaultRulesKey: string(edit)},
	}}
	rep := diffJSON(t, r, diffExitBlocked, "--rules", explainEditRules)
	digest := plan.RulesDigest(edit)
	if rep.ConfigMap == nil || rep.ConfigMap.Digest != digest || rep.ConfigMap.Error != "" {
		t.Errorf("configMap %+v, want digest %s", rep.ConfigMap, digest)
	}
	if g := rep.groupOf(t, "a100-1"); g.Runs != runsOther || g.Digest != "builtin:mixed" || !g.Blocked {
		t.Errorf("DGX A100 group: %s", diffDump(g))
	}
	out, _, _ := runDiff(t, r, "--rules", explainEditRules)
	if want := "runs      other rules (builtin:mixed) than the ConfigMap (" + digest + ")\n"; !strings.Contains(out, want) {
		t.Errorf("table lacks %q:\n%s", want, out)
	}
	// Compared with the ConfigMap itself, nothing changes: the nodes are
	// still named as running other rules.
	rep = diffJSON(t, r, diffExitPass, "--rules", explainEditRules, "--current", "configmap")
	if rep.Baseline != "rules" || rep.CurrentDigest != digest || rep.groupOf(t, "h100").Runs != runsOther {
		t.Errorf("--current configmap: %s", diffDump(rep))
	}
	for _, g := range rep.Groups {
		if len(g.Changes) > 0 || len(g.Unclaimed) > 0 {
			t.Errorf("--current configmap: nodes %v change: %s", g.Nodes, diffDump(g))
		}
	}
	// A node already running the ConfigMap's rules is said so.
	r.serve(t, "h100-new", explainTestInventory(t, "dgx-h100"), nil, explainEditRules, plan.ServeDevicePlugin)
	if g := diffJSON(t, r, diffExitBlocked, "--rules", "mixed").groupOf(t, "h100-new"); g.Runs != runsConfigMap {
		t.Errorf("a node running the ConfigMap's rules: runs %q", g.Runs)
	}
	if g := diffJSON(t, r, diffExitBlocked, "--rules", explainEditRules).groupOf(t, "h100-new"); g.Runs != runsProposed || len(g.Changes) != 0 {
		t.Errorf("a node running the proposed rules: %s", diffDump(g))
	}
}

// TestRulesDiffCurrentFile: --current FILE compares two files on every
// node's features; nodes that run the current file are named so.
func TestRulesDiffCurrentFile(t *testing.T) {
	r := diffTestNodes(t)
	served := diffJSON(t, r, diffExitBlocked, "--rules", explainEditRules)
	rep := diffJSON(t, r, diffExitBlocked, "--rules", explainEditRules, "--current", "mixed")
	if rep.Baseline != "rules" || rep.Current != "builtin:mixed" {
		t.Errorf("baseline %q %q", rep.Baseline, rep.Current)
	}
	a100 := rep.groupOf(t, "a100-1")
	if a100.Runs != runsCurrent || !reflect.DeepEqual(diffOps(a100), diffOps(served.groupOf(t, "a100-1"))) {
		t.Errorf("DGX A100 against --current mixed: %s", diffDump(a100))
	}
	// The workstation's plan is made from its features: sharing is known.
	if ws := rep.groupOf(t, "ws"); !reflect.DeepEqual(diffOps(ws), []string{"sharing-changed nvidia.com/gpu"}) || ws.Runs != runsUnknown {
		t.Errorf("workstation against --current mixed: %s", diffDump(ws))
	}
	if _, errOut, code := runDiff(t, r, "--rules", explainEditRules, "--current", "/nonexistent/rules.yaml"); code != diffExitInput {
		t.Errorf("--current missing file: exit %d\n%s", code, errOut)
	}
}

// TestRulesDiffPartialLoss: fewer devices, or fewer replicas, of a resource
// that stays is a loss too; the policy lets it pass by name or pattern.
func TestRulesDiffPartialLoss(t *testing.T) {
	r := &clusterFakeReader{}
	shared := diffTestRules(t, "shared.yaml", "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n  sharing: {strategy: time-slicing, replicas: 4}\n"+
		"- name: mig\n  devices: mig\n  resource: nvidia.com/mig\n")
	r.serve(t, "a100", explainTestInventory(t, "dgx-a100"), nil, shared, plan.ServeDevicePlugin)
	r.serve(t, "h100", explainTestInventory(t, "dgx-h100"), nil, shared, plan.ServeDevicePlugin)
	// Half the A100s' whole GPUs, half the replicas on the H100s.
	next := diffTestRules(t, "next.yaml", "- name: a100\n  devices: gpu\n"+
		"  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: [A100]}, index: {op: In, value: ['4', '5']}}}]\n"+
		"  resource: nvidia.com/gpu\n  sharing: {strategy: time-slicing, replicas: 4}\n"+
		"- name: h100\n  devices: gpu\n  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: [H100]}}}]\n"+
		"  resource: example.com/h100\n  sharing: {strategy: time-slicing, replicas: 4}\n"+
		"- name: mig\n  devices: mig\n  resource: nvidia.com/mig\n")
	rep := diffJSON(t, r, diffExitBlocked, "--rules", next)
	a100 := rep.groupOf(t, "a100")
	if !reflect.DeepEqual(diffOps(a100), []string{"count-down nvidia.com/gpu !"}) || len(a100.Unclaimed) != 2 || a100.Unclaimed[0].Index != "6" {
		t.Errorf("DGX A100: %s", diffDump(a100))
	}
	h100 := rep.groupOf(t, "h100")
	if !reflect.DeepEqual(diffOps(h100), []string{"added example.com/h100", "removed nvidia.com/gpu !"}) {
		t.Errorf("DGX H100: %q", diffOps(h100))
	}
	fewer := diffTestRules(t, "fewer.yaml", "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n  sharing: {strategy: time-slicing, replicas: 2}\n"+
		"- name: mig\n  devices: mig\n  resource: nvidia.com/mig\n")
	rep = diffJSON(t, r, diffExitBlocked, "--rules", fewer)
	c := rep.groupOf(t, "h100").Changes
	if len(c) != 1 || c[0].Op != opSharingChanged || !c[0].Blocking || c[0].Reason != "capacity 32 -> 16" {
		t.Errorf("fewer replicas: %s", diffDump(c))
	}

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--allow-loss"}, diffExitPass},
		{[]string{"--allow-loss-of", "nvidia.com/*"}, diffExitPass},
		{[]string{"--allow-loss-of", "nvidia.com/gpu"}, diffExitPass},
		{[]string{"--allow-loss-of", "nvidia.com/mig"}, diffExitBlocked},
		{[]string{"--allow-loss-of", "example.com/h100,nvidia.com/mig"}, diffExitBlocked},
	} {
		rep := diffJSON(t, r, tc.code, append([]string{"--rules", next}, tc.args...)...)
		if tc.code == diffExitPass {
			for _, g := range rep.Groups {
				for _, c := range g.Changes {
					if c.Loss && (!c.Allowed || c.Blocking) {
						t.Errorf("%q: loss %s %s not allowed", tc.args, c.Op, c.Resource)
					}
				}
			}
		}
	}
	out, _, _ := runDiff(t, r, "--rules", next, "--allow-loss-of", "nvidia.com/*")
	for _, line := range []string{"Policy:    a loss blocks, except of nvidia.com/*; warnings do not block (--fail-on-warning)\n",
		"  ~ nvidia.com/gpu: 4 -> 2 devices  [loss: allowed]\n", "  no resource  GPU 6 NVIDIA A100-SXM4-40GB (" + explainTestInventory(t, "dgx-a100").GPUs[6].UUID + "): was nvidia.com/gpu\n",
		"Result: pass (exit 0)\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("table lacks %q:\n%s", line, out)
		}
	}
}

// TestRulesDiffServeDRA: moving a resource to DRA is a change of its
// serving API, and a loss while no DeviceClass serves its extended
// resource name; the DeviceClass selection is compared with the cluster's.
func TestRulesDiffServeDRA(t *testing.T) {
	r := &clusterFakeReader{}
	r.serve(t, "h100", explainTestInventory(t, "dgx-h100"), nil, "mixed", plan.ServeDevicePlugin)
	dra := diffTestRules(t, "dra.yaml", "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n  serve: dra\n"+
		"- name: mig\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile | replace \"+\" \".\" }}'\n")
	rep := diffJSON(t, r, diffExitBlocked, "--rules", dra)
	c := rep.groupOf(t, "h100").Changes
	if len(c) != 1 || c[0].Op != opServeChanged || c[0].From.Serve != plan.ServeDevicePlugin || c[0].To.Serve != plan.ServeDRA ||
		!c[0].Blocking || !strings.Contains(c[0].Reason, "no DeviceClass in the cluster has extendedResourceName nvidia.com/gpu") {
		t.Errorf("serve: dra: %s", diffDump(c))
	}
	classes, err := draclass.CompileCatalog(mustLoadRules(t, dra))
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := classes.Class("nvidia.com/gpu")
	if want := []diffClassChange{{Op: opClassAdded, Resource: "nvidia.com/gpu", Class: "gpu.nvidia.com.featureplug.io", To: cl.Selector}}; !reflect.DeepEqual(rep.DeviceClasses, want) {
		t.Errorf("deviceClasses %s, want %s", diffDump(rep.DeviceClasses), diffDump(want))
	}

	// With the class applied, the move loses nothing.
	r.classes = []resourcev1.DeviceClass{*cl.Object}
	rep = diffJSON(t, r, diffExitPass, "--rules", dra)
	if c := rep.groupOf(t, "h100").Changes; len(c) != 1 || c[0].Op != opServeChanged || c[0].Loss || len(rep.DeviceClasses) != 0 {
		t.Errorf("serve: dra with its DeviceClass: %s", diffDump(rep))
	}
	// A class that selects otherwise is a changed selection.
	other := cl.Object.DeepCopy()
	other.Spec.Selectors[0].CEL.Expression = `device.driver == "gpu.featureplug.io"`
	r.classes = []resourcev1.DeviceClass{*other}
	rep = diffJSON(t, r, diffExitPass, "--rules", dra)
	if want := []diffClassChange{{Op: opClassChanged, Resource: "nvidia.com/gpu", Class: "gpu.nvidia.com.featureplug.io", From: `device.driver == "gpu.featureplug.io"`, To: cl.Selector}}; !reflect.DeepEqual(rep.DeviceClasses, want) {
		t.Errorf("deviceClasses %s", diffDump(rep.DeviceClasses))
	}

	// A node whose agent serves through DRA by default: the same rules
	// without serve change nothing; serve: device-plugin moves it back.
	r = &clusterFakeReader{classes: []resourcev1.DeviceClass{*cl.Object}}
	r.serve(t, "h100-dra", explainTestInventory(t, "dgx-h100"), nil, "mixed", plan.ServeDRA)
	if g := diffJSON(t, r, diffExitPass, "--rules", "mixed").groupOf(t, "h100-dra"); len(g.Changes) != 0 || g.Runs != runsProposed {
		t.Errorf("the rules an agent with --serve dra runs: %s", diffDump(g))
	}
	back := diffTestRules(t, "back.yaml", "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n  serve: device-plugin\n")
	c = diffJSON(t, r, diffExitPass, "--rules", back).groupOf(t, "h100-dra").Changes
	if len(c) != 1 || c[0].Op != opServeChanged || c[0].From.Serve != plan.ServeDRA || c[0].To.Serve != plan.ServeDevicePlugin || c[0].Loss {
		t.Errorf("back to device plugins: %s", diffDump(c))
	}
}

func mustLoadRules(t testing.TB, nameOrPath string) *rules.RuleSet {
	t.Helper()
	rs, err := rules.Load(nameOrPath)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestRulesDiffFailures: rules that cannot plan a node, or leave devices
// out, block; warnings block with --fail-on-warning (or --strict).
func TestRulesDiffFailures(t *testing.T) {
	r := diffTestNodes(t)
	// More MPS memory per client than an A100 40GB has, less than an H100's.
	big := diffTestRules(t, "big.yaml", "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n"+
		"  sharing: {strategy: mps, replicas: 2, mps: {pinnedMemoryLimitMiB: 60000}}\n")
	rep := diffJSON(t, r, diffExitBlocked, "--rules", big, "-l", "kubernetes.io/hostname in (a100-1,a100-2,h100)")
	if g := rep.groupOf(t, "a100-1"); !strings.Contains(g.Error, "more than the GPU's 40960 MiB") || len(g.Changes) != 0 || !g.Blocked {
		t.Errorf("rules that cannot plan the DGX A100: %s", diffDump(g))
	}
	if g := rep.groupOf(t, "h100"); g.Error != "" || len(g.Changes) == 0 {
		t.Errorf("the DGX H100: %s", diffDump(g))
	}
	if !strings.Contains(rep.Error, "the rules fail on 2 nodes") {
		t.Errorf("error %q", rep.Error)
	}
	// Messages that name devices by UUID do not split nodes of one kind.
	many := diffJSON(t, diffTestCluster(t, 4*len(diffTestKinds)), diffExitBlocked, "--rules", big)
	if len(many.Groups) > len(diffTestKinds) || !strings.Contains(many.groupOf(t, "node-0000").Error, "GPU 4 NVIDIA A100-SXM4-40GB: per-replica limit") {
		t.Errorf("%d groups for %d kinds of node: %s", len(many.Groups), len(diffTestKinds), diffDump(many.Groups))
	}

	badName := diffTestRules(t, "badname.yaml", "- name: gpu\n  devices: gpu\n  resource: 'example.com/{{ .product }}'\n")
	g := diffJSON(t, r, diffExitBlocked, "--rules", badName).groupOf(t, "h100")
	h100 := explainTestInventory(t, "dgx-h100")
	if len(g.Problems) != 8 || g.Problems[0].Index != "0" || g.Problems[0].Rule != "gpu" || g.Problems[0].UUIDs["h100"] != h100.GPUs[0].UUID || g.Problems[0].Message == "" {
		t.Errorf("devices left out: %s", diffDump(g.Problems))
	}

	// The workstation's counts-only annotation is a warning.
	diffJSON(t, r, diffExitPass, "--rules", "mixed", "-l", "kubernetes.io/hostname notin (a100-1,a100-2,h100)")
	for _, flag := range []string{"--fail-on-warning", "--strict"} {
		rep := diffJSON(t, r, diffExitBlocked, "--rules", "mixed", flag)
		if !rep.Policy.FailOnWarning || !strings.Contains(rep.Error, "1 node with warnings") || !rep.groupOf(t, "ws").Blocked {
			t.Errorf("%s: %s", flag, diffDump(rep))
		}
	}
	warn := diffTestRules(t, "warn.yaml", "- name: gpu\n  devices: gpu\n  matchFeatures: [{feature: nvidia.fan, matchExpressions: {speed: {op: Exists}}}]\n  resource: example.com/gpu\n")
	rep = diffJSON(t, &clusterFakeReader{nodes: r.nodes[4:]}, diffExitPass, "--rules", warn)
	if len(rep.Warnings) == 0 {
		t.Fatalf("no warnings for %s", warn)
	}
	rep = diffJSON(t, &clusterFakeReader{nodes: r.nodes[4:]}, diffExitBlocked, "--rules", warn, "--fail-on-warning")
	if !strings.Contains(rep.Error, "the rules file has 1 warning (--fail-on-warning)") {
		t.Errorf("error %q", rep.Error)
	}
}

// TestRulesDiffExitCodes: 0 pass, 1 blocked, 2 usage or input error, 3
// cluster unreachable or data missing; -o json prints one report for each.
func TestRulesDiffExitCodes(t *testing.T) {
	r := diffTestNodes(t)
	bad := diffTestRules(t, "bad.yaml", "- name: gpu\n  devices: gpu\n")
	unreachable := &clusterFakeReader{err: errors.New(`Get "https://127.0.0.1:1/api/v1/nodes": dial tcp 127.0.0.1:1: connect: connection refused`)}
	noAnnotation := diffTestNodes(t)
	noAnnotation.add(t, "new", explainTestInventory(t, "dgx-h100"), nil, "")
	blocking := diffTestNodes(t)
	blocking.add(t, "new", explainTestInventory(t, "dgx-h100"), nil, "")
	tests := []struct {
		name string
		r    *clusterFakeReader
		args []string
		code int
		want string
	}{
		{"pass", r, []string{"--rules", "mixed", "-l", "kubernetes.io/hostname notin (ws)"}, 0, ""},
		{"blocked", r, []string{"--rules", "none"}, 1, "rules diff: blocked: 2 nodes would lose resources (nvidia.com/mig-1g.5gb, nvidia.com/mig-2g.10gb, nvidia.com/mig-3g.20gb); " +
			"--allow-loss or --allow-loss-of RESOURCE lets a loss pass"},
		{"no rules", r, nil, 2, "--rules: the proposed rules file is required"},
		{"unknown flag", r, []string{"--rules", "mixed", "--allow-losses"}, 2, "unknown flag: --allow-losses"},
		{"argument", r, []string{"new.yaml"}, 2, `rules diff takes no arguments (have ["new.yaml"]): give the proposed rules with --rules`},
		{"missing file", r, []string{"--rules", "/nonexistent/rules.yaml"}, 2, "/nonexistent/rules.yaml"},
		{"misspelt builtin", r, []string{"--rules", "mixd"}, 2, `did you mean "mixed"?`},
		{"invalid file", r, []string{"--rules", bad}, 2, bad},
		{"bad selector", r, []string{"--rules", "mixed", "-l", "pool in (a"}, 2, `--selector "pool in (a"`},
		{"selector matches nothing", r, []string{"--rules", "mixed", "-l", "nomatch=x"}, 2, `--selector "nomatch=x" matches no Node`},
		{"bad pattern", r, []string{"--rules", "mixed", "--allow-loss-of", "nvidia.com/[gpu"}, 2, `--allow-loss-of "nvidia.com/[gpu"`},
		{"missing ConfigMap", r, []string{"--rules", "mixed", "--current", "configmap"}, 2,
			"give the rules to compare with as --current FILE, or the ConfigMap with --namespace, --configmap and --configmap-key"},
		{"unreachable", unreachable, []string{"--rules", "mixed"}, 3, "connection refused"},
		{"unreachable ConfigMap", unreachable, []string{"--rules", "mixed", "--current", "configmap"}, 3, "connection refused"},
		{"no served record", noAnnotation, []string{"--rules", "mixed", "-l", "kubernetes.io/hostname in (new,h100)"}, 3,
			"rules diff: incomplete: 1 node cannot be compared: its NodeFeature records nothing served (annotation featureplug.io/resources)"},
		{"blocked and incomplete", blocking, []string{"--rules", "none"}, 1, "blocked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := diffJSON(t, tc.r, tc.code, tc.args...)
			if !strings.Contains(rep.Error, tc.want) {
				t.Errorf("error %q, want %q", rep.Error, tc.want)
			}
			out, _, code := runDiff(t, tc.r, tc.args...)
			if code != tc.code {
				t.Errorf("table: exit %d, want %d", code, tc.code)
			}
			if tc.code == diffExitInput && out != "" {
				t.Errorf("table output on a usage error:\n%s", out)
			}
		})
	}
	// Without a known format, there is no report.
	if out, _, code := runDiff(t, r, "--rules", "mixed", "-o", "yaml"); code != diffExitInput || out != "" {
		t.Errorf("-o yaml: exit %d:\n%s", code, out)
	}
	cmd := newRulesDiffCommandWith(func(*clusterFlags) (clusterReader, error) { return nil, errors.New("kubeconfig: no configuration") })
	if _, _, err := runCommand(cmd, "--rules", "mixed"); exitCode(err) != diffExitInput {
		t.Errorf("no kubeconfig: %v (exit %d)", err, exitCode(err))
	}
	if rep := diffJSON(t, blocking, 1, "--rules", "none"); len(rep.Incomplete) != 1 || !reflect.DeepEqual(rep.Incomplete[0].Nodes, []string{"new"}) {
		t.Errorf("incomplete nodes: %s", diffDump(rep.Incomplete))
	}
}

// TestRulesDiffOneScreen: 1,000 nodes of eight kinds (six outcomes) and
// 200 without an agent fit on one screen, with correct plurals.
func TestRulesDiffOneScreen(t *testing.T) {
	r := diffTestCluster(t, 1000)
	for i := range 200 {
		r.nodes = append(r.nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cpu-%03d", i)}})
	}
	out, _, code := runDiff(t, r, "--rules", explainEditRules)
	if code != diffExitBlocked {
		t.Errorf("exit %d", code)
	}
	if n := strings.Count(out, "\n"); n > 60 {
		t.Errorf("%d lines for 1,000 nodes of 8 kinds:\n%s", n, out)
	}
	for _, line := range []string{"1200 nodes: 1000 compared in 6 outcomes, 200 without an agent; 375 blocked\n",
		"\nnode-0000, node-0008, node-0016, node-0024 and 121 more (125 nodes)\n",
		"Without an agent (200 nodes): cpu-000, cpu-001, cpu-002, cpu-003 and 196 more\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("table lacks %q:\n%s", line, out)
		}
	}
	for _, wrong := range []string{"1 nodes", "1 outcomes", "1 devices"} {
		if strings.Contains(out, wrong) {
			t.Errorf("table says %q:\n%s", wrong, out)
		}
	}
}

// diffTestKinds are the bundled fake nodes a generated cluster is made of.
var diffTestKinds = []string{"dgx-a100", "dgx-h100", "workstation", "h100-nvl", "hgx-b200", "l40s-pcie", "a100-80gb-mixed", "h200-mig"}

// diffTestCluster is n nodes of the bundled kinds in turn, each with its
// own UUIDs, whose agents serve the builtin "mixed" rules.
func diffTestCluster(t testing.TB, n int) *clusterFakeReader {
	t.Helper()
	invs := make([]*discovery.Inventory, len(diffTestKinds))
	for i, k := range diffTestKinds {
		invs[i] = explainTestInventory(t, k)
	}
	r := &clusterFakeReader{}
	for i := range n {
		inv := *invs[i%len(invs)]
		inv.GPUs = append([]discovery.GPU(nil), inv.GPUs...)
		for g := range inv.GPUs {
			gpu := &inv.GPUs[g]
			gpu.UUID = fmt.Sprintf("GPU-%08d-%04d", i, g)
			gpu.MIGDevices = append([]discovery.MIGDevice(nil), gpu.MIGDevices...)
			for m := range gpu.MIGDevices {
				gpu.MIGDevices[m].ParentUUID = gpu.UUID
				gpu.MIGDevices[m].UUID = fmt.Sprintf("MIG-%08d-%04d-%02d", i, g, m)
			}
		}
		r.serve(t, fmt.Sprintf("node-%04d", i), &inv, map[string]string{"pool": "p" + fmt.Sprint(i%3)}, "mixed", plan.ServeDevicePlugin)
	}
	return r
}

// BenchmarkRulesDiff1000 runs `rules diff` over 1,000 generated nodes
// of eight kinds, from the listed objects to the printed table.
func BenchmarkRulesDiff1000(b *testing.B) {
	r := diffTestCluster(b, 1000)
	b.ResetTimer()
	for b.Loop() {
		out, _, code := runDiff(b, r, "--rules", explainEditRules)
		if code != diffExitBlocked || len(out) == 0 {
			b.Fatalf("exit %d", code)
		}
	}
}

func TestRecordedServed(t *testing.T) {
	p := &plan.Plan{Resources: []plan.Resource{
		{Name: "example.com/a100", Devices: []plan.Device{{Index: "0"}, {Index: "1"}}},
		{Name: "nvidia.com/gpu", Serve: plan.ServeDRA, Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2}, Devices: []plan.Device{{Index: "2"}}},
	}}
	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{labeler.AnnotationResources: labeler.NewServed(p, plan.ServeDevicePlugin).String()},
			"example.com/a100 (2 devices), nvidia.com/gpu (1 device, time-slicing x2, through dra)"},
		{map[string]string{labeler.AnnotationResources: "example.com/a100=2"}, "example.com/a100 (2 devices)"},
		{map[string]string{labeler.AnnotationResources: ""}, "nothing"},
		{map[string]string{labeler.AnnotationResources: "a=x"}, `"a=x"`},
		{nil, "what, it does not record"},
	} {
		if got := recordedServed(tc.annotations); got != tc.want {
			t.Errorf("recordedServed(%v) = %q, want %q", tc.annotations, got, tc.want)
		}
	}
}
