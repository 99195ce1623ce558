package e2e

// Fault tests of the rules engine and the CLI: a rules file `featureplug rules check` accepts never crashes `run`;
// check finds at check time what would fail on a node; a device whose rule
// gives an invalid name is left out and reported while the rest serves;
// bad commands fail clearly.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/test/harness"
)

// rulesFaultHeader starts every rules file of these tests.
const rulesFaultHeader = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"

// rulesFaultShared is a valid file: every whole GPU time-sliced 4 ways.
const rulesFaultShared = rulesFaultHeader + `- name: shared
  devices: gpu
  resource: example.com/shared
  sharing: {strategy: time-slicing, replicas: 4}
`

// rulesFaultHuge is rulesFaultShared with a billion replicas: enough to
// run a planner without caps out of memory.
const rulesFaultHuge = rulesFaultHeader + `- name: shared
  devices: gpu
  resource: example.com/shared
  sharing: {strategy: time-slicing, replicas: 1000000000}
`

// rulesFaultMIG names MIG resources after their profile, which gives an
// invalid name for +me profiles, and serves whole GPUs as nvidia.com/gpu.
const rulesFaultMIG = rulesFaultHeader + `- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile }}'
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu
`

// rulesFaultCLI runs the featureplug binary with args and returns its
// stdout, stderr and exit code.
func rulesFaultCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(build.agent, args...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("running featureplug %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// rulesFaultWrite writes a rules file in dir and returns its path.
func rulesFaultWrite(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// rulesFaultWaitLog waits until the agent's log holds every string.
func rulesFaultWaitLog(t *testing.T, a *agent, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		tail := a.Tail(400)
		for _, w := range want {
			if !strings.Contains(tail, w) {
				return false, fmt.Sprintf("log lacks %q", w)
			}
		}
		return true, ""
	}); err != nil {
		t.Fatalf("featureplug for node %s: %v\n%s", a.spec.Node, err, a.Tail(40))
	}
}

// rulesFaultWaitAllocatable waits until the kubelet side can allocate n
// devices of a resource. A resource withdrawn keeps its capacity, all
// unhealthy, until the kubelet's grace period ends.
func rulesFaultWaitAllocatable(t *testing.T, peer *harness.KubeletPeer, resource string, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		_, al := peer.Capacity(resource)
		return al == n, fmt.Sprintf("%s has %d allocatable, want %d", resource, al, n)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestFault07HugeReplicas: replicas over the cap are an error at check
// time naming the file, rule, field, value and cap, in explain too; as a
// hot reload to an agent serving a good plan they are refused, the last
// plan keeps serving and the process stays alive.
func TestFault07HugeReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	dir := t.TempDir()
	huge := rulesFaultWrite(t, dir, "huge.yaml", rulesFaultHuge)
	want := huge + `:7: rules[0] "shared": sharing.replicas: must be at most 1024 (plan.MaxReplicas) (have 1000000000)`

	_, stderr, code := rulesFaultCLI(t, "rules", "check", huge)
	if code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("rules check %s: exit %d, stderr:\n%s\nwant an error containing %q", huge, code, stderr, want)
	}
	_, stderr, code = rulesFaultCLI(t, "rules", "explain", "--rules", huge, "--fake-node", "dgx-a100")
	if code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("rules explain --rules %s: exit %d, stderr:\n%s", huge, code, stderr)
	}

	// run with a good file, then the huge one as a hot reload.
	rulesFile := rulesFaultWrite(t, shortTempDir(t), "rules.yaml", rulesFaultShared)
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	a := startAgent(t, agentSpec{Node: "fault07", FakeNode: "dgx-a100", Rules: rulesFile, KubeletDir: kubeletDir})
	// dgx-a100 has 4 whole GPUs (GPUs 0-3 are in MIG mode): 4 x 4 replicas.
	waitCapacities(t, peer, map[string]int64{"example.com/shared": 4 * 4})
	a.waitMetric(t, "featureplug_plugin_devices", func(v float64) bool { return v == 16 }, `resource="example.com/shared"`, `health="healthy"`)
	invalid := a.metric(t, "featureplug_rule_reloads_total", `result="invalid"`)

	writeFileAtomic(t, rulesFile, []byte(rulesFaultHuge))
	a.waitMetric(t, "featureplug_rule_reloads_total", func(v float64) bool { return v > invalid }, `result="invalid"`)
	rulesFaultWaitLog(t, a, "rules rejected; keeping the last good plan", "must be at most 1024 (plan.MaxReplicas)")
	if !a.Running() {
		t.Fatalf("featureplug exited after the hot reload: %v\n%s", a.ExitErr(), a.Tail(40))
	}
	if code, body, err := a.get("/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz after the hot reload: %d %s %v", code, body, err)
	}
	if got := a.metric(t, "featureplug_plugin_devices", `resource="example.com/shared"`, `health="healthy"`); got != 16 {
		t.Errorf("featureplug_plugin_devices{resource=example.com/shared} = %v after the refused reload, want the last plan's 16", got)
	}
	if c, al := peer.Capacity("example.com/shared"); c != 16 || al != 16 {
		t.Errorf("kubelet capacity of example.com/shared = %d (%d allocatable) after the refused reload, want 16", c, al)
	}
}

// rulesFaultMIGFixed is rulesFaultMIG with the template made valid on
// every profile: "+" becomes ".".
const rulesFaultMIGFixed = rulesFaultHeader + `- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "." }}'
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu
`

// rulesFaultMIGMessage is the start of the one message check, explain and
// run give for the +me device of a100-80gb-mixed under rulesFaultMIG.
const rulesFaultMIGMessage = `rules[0] "mig": resource: template gives "nvidia.com/mig-1g.10gb+me" for GPU 0 MIG 3 (1g.10gb+me)`

// TestFault08InvalidTemplateName: a template that gives an invalid name on
// some catalog device is an error at check time naming the rule, device and
// name. On a node with such a device (a 1g.10gb+me MIG device) and valid
// names for the others, check on the node, explain on the node and run
// give one verdict: the plan is refused, with one message naming the
// file, rule, device and value. As a hot reload the last good plan keeps
// serving (rule_reloads_total{result="invalid"}, Warning Event
// InvalidRules); no device of the file is served.
func TestFault08InvalidTemplateName(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	dir := t.TempDir()
	migFile := rulesFaultWrite(t, dir, "mig.yaml", rulesFaultMIG)
	_, stderr, code := rulesFaultCLI(t, "rules", "check", migFile)
	for _, want := range []string{
		`rules[0] "mig": resource: template gives "nvidia.com/mig-1g.10gb+me" on fake node a100-80gb-mixed, NVIDIA A100-SXM4-80GB MIG 1g.10gb+me`,
		// Every catalog product's +me profile, not only the bundled nodes'.
		`template gives "nvidia.com/mig-1g.18gb+me" on catalog product H200-141GB`,
	} {
		if code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("rules check %s: exit %d, stderr:\n%s\nwant an error containing %q", migFile, code, stderr, want)
		}
	}
	// Product names with spaces: check errors, as run refuses them.
	product := rulesFaultWrite(t, dir, "product.yaml", rulesFaultHeader+"- name: per-product\n  devices: gpu\n  resource: 'example.com/{{ .product }}'\n")
	_, stderr, code = rulesFaultCLI(t, "rules", "check", product)
	if code == 0 || !strings.Contains(stderr, `rules[0] "per-product": resource: template gives "example.com/NVIDIA H100 80GB HBM3"`) {
		t.Errorf("rules check %s: exit %d, stderr:\n%s", product, code, stderr)
	}
	_, checkErr, code := rulesFaultCLI(t, "rules", "check", "--fake-node", "a100-80gb-mixed", migFile)
	message := rulesFaultLine(checkErr, rulesFaultMIGMessage) // check's whole message for the device
	if code != 1 || message == "" || !strings.HasPrefix(message, migFile+":6: ") {
		t.Fatalf("rules check --fake-node a100-80gb-mixed %s: exit %d, stderr:\n%s\nwant %s:6: %s...", migFile, code, checkErr, migFile, rulesFaultMIGMessage)
	}
	out, stderr, code := rulesFaultCLI(t, "rules", "explain", "--rules", migFile, "--fake-node", "a100-80gb-mixed")
	if code != 1 || !strings.Contains(out, "resource  none: left out because of its rule") ||
		!strings.Contains(stderr, "run refuses this plan on this node:\n"+message) {
		t.Errorf("rules explain: exit %d, want 1 with check's message %q\nstdout:\n%s\nstderr:\n%s", code, message, out, stderr)
	}

	api := harness.StartAPIServer(t)
	c := &cluster{api: api}
	node := c.node(t, "fault08", nil)
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	rulesFile := rulesFaultWrite(t, shortTempDir(t), "rules.yaml", rulesFaultMIGFixed)
	a := startAgent(t, agentSpec{
		Node: node, FakeNode: "a100-80gb-mixed", Rules: rulesFile, KubeletDir: kubeletDir,
		Kubeconfig: api.KubeconfigPath, Namespace: agentNamespace,
	})
	served := map[string]int64{
		"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-1g.10gb.me": 1, "nvidia.com/gpu": 1,
	}
	waitCapacities(t, peer, served)
	a.waitMetric(t, "featureplug_ready", func(v float64) bool { return v == 1 })
	applied := a.metric(t, "featureplug_rule_reloads_total", `result="applied"`)

	// The hot reload to the template invalid on the +me device is refused
	// whole, with check's message; the last good plan keeps serving.
	writeFileAtomic(t, rulesFile, []byte(rulesFaultMIG))
	a.waitMetric(t, "featureplug_rule_reloads_total", func(v float64) bool { return v == 1 }, `result="invalid"`)
	rulesFaultWaitLog(t, a, "rules rejected; keeping", strings.ReplaceAll(strings.TrimPrefix(message, migFile), `"`, `\"`))
	if err := c.waitEvent(node, "InvalidRules"); err != nil {
		t.Errorf("node %s: %v", node, err)
	}
	for _, result := range []string{"applied", "partial"} {
		want := 0.0
		if result == "applied" {
			want = applied
		}
		if got := a.metric(t, "featureplug_rule_reloads_total", `result="`+result+`"`); got != want {
			t.Errorf(`featureplug_rule_reloads_total{result=%q} = %v after the refused reload, want %v`, result, got, want)
		}
	}
	waitCapacities(t, peer, served)
	if code, body, err := a.get("/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz: %d %s %v", code, body, err)
	}

	// A file every device of which is left out is refused the same way.
	invalid := a.metric(t, "featureplug_rule_reloads_total", `result="invalid"`)
	writeFileAtomic(t, rulesFile, []byte(rulesFaultHeader+"- name: all-bad\n  devices: mig\n  resource: 'nvidia.com/mig {{ .profile }}'\n"))
	a.waitMetric(t, "featureplug_rule_reloads_total", func(v float64) bool { return v > invalid }, `result="invalid"`)
	if got := a.metric(t, "featureplug_rule_reloads_total", `result="applied"`); got != applied {
		t.Errorf(`featureplug_rule_reloads_total{result="applied"} = %v after a file that plans nothing, want %v`, got, applied)
	}
	waitCapacities(t, peer, served)
}

// rulesFaultLine returns the first line of out that contains want,
// trimmed, or "".
func rulesFaultLine(out, want string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, want) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestFault15BadCommands: unknown subcommands fail naming the command; a
// misspelt builtin rules name is neither a file nor a builtin, with a
// suggestion, in check, explain and run alike; --node-labels is the flag
// name everywhere, --node-label a deprecated alias that still works.
func TestFault15BadCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	// Usage errors exit 2 everywhere: unknown commands and flags, bad
	// arguments, rules files that do not exist.
	for _, args := range [][]string{{"rules", "frobnicate"}, {"frobnicate"}, {"rules", "check", "--frobnicate"},
		{"rules", "explain", "--frobnicate"}, {"discover", "--frobnicate"}, {"rules", "check", "frobnicate.yaml"},
		{"run", "--rules", "frobnicate.yaml", "--fake-node", "dgx-a100", "--publish", "none"}} {
		_, stderr, code := rulesFaultCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, "frobnicate") {
			t.Errorf("featureplug %v: exit %d, want 2; stderr:\n%s", args, code, stderr)
		}
	}
	if _, stderr, _ := rulesFaultCLI(t, "run", "--rules", "frobnicate.yaml", "--fake-node", "dgx-a100"); !strings.Contains(stderr, "--wait-for-rules") {
		t.Errorf("run with a missing rules file does not name --wait-for-rules:\n%s", stderr)
	}
	// One way to give a rules file: --rules, or the argument.
	for _, args := range [][]string{{"rules", "check", "--rules", "mixed"}, {"rules", "explain", "mixed", "--fake-node", "dgx-a100"}} {
		if _, stderr, code := rulesFaultCLI(t, args...); code != 0 {
			t.Errorf("featureplug %v: exit %d\n%s", args, code, stderr)
		}
	}
	_, stderr, _ := rulesFaultCLI(t, "rules", "frobnicate")
	if !strings.Contains(stderr, `unknown command "frobnicate" for "featureplug rules"`) {
		t.Errorf("featureplug rules frobnicate: stderr:\n%s", stderr)
	}

	dir := t.TempDir()
	const mixd = `rules "mixd" is neither a file nor a builtin (builtins: mixed, none, per-model, single); did you mean "mixed"?`
	for _, args := range [][]string{
		{"rules", "check", "mixd"},
		{"rules", "explain", "--rules", "mixd", "--fake-node", "dgx-a100"},
		{"run", "--rules", "mixd", "--fake-node", "dgx-a100", "--node-name", "fault15", "--publish", "none",
			"--kubelet-dir", dir, "--metrics-addr", ""},
	} {
		cmd := exec.Command(build.agent, args...)
		cmd.Dir = dir // no file called mixd here
		cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), mixd) {
			t.Errorf("featureplug %v: %v, output:\n%s\nwant %q", args, err, out, mixd)
		}
	}

	// --kubelet-dir naming a file: one line naming the flag and the path,
	// before anything starts.
	notDir := rulesFaultWrite(t, dir, "device-plugins", "")
	_, stderr, code := rulesFaultCLI(t, "run", "--fake-node", "dgx-a100", "--node-name", "fault15", "--publish", "none",
		"--kubelet-dir", notDir, "--metrics-addr", "", "--state-dir", t.TempDir())
	if want := "featureplug: --kubelet-dir " + notDir + " is not a directory (it is a regular file)"; code != 2 ||
		!strings.HasPrefix(stderr, want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("run --kubelet-dir FILE: exit %d, stderr:\n%s\nwant exit 2 and the one line %q...", code, stderr, want)
	}

	pools := rulesFaultWrite(t, dir, "pools.yaml", rulesFaultHeader+`- name: inference
  devices: gpu
  nodeSelector:
    matchLabels: {pool: inference}
  resource: example.com/inference
`)
	for _, flag := range []string{"--node-labels", "--node-label"} {
		out, stderr, code := rulesFaultCLI(t, "rules", "explain", "--rules", pools, "--fake-node", "dgx-h100", flag, "pool=inference")
		if code != 0 || !strings.Contains(out, "example.com/inference") {
			t.Errorf("rules explain %s pool=inference: exit %d\n%s\n%s", flag, code, out, stderr)
		}
		if deprecated := strings.Contains(stderr, "flag --node-label is deprecated, use --node-labels"); deprecated != (flag == "--node-label") {
			t.Errorf("rules explain %s: deprecation note %v:\n%s", flag, deprecated, stderr)
		}
	}
	a := startAgent(t, agentSpec{Node: "fault15", FakeNode: "dgx-h100", Rules: pools, Extra: []string{"--node-label", "pool=inference"}})
	a.waitMetric(t, "featureplug_plugin_devices", func(v float64) bool { return v == 8 }, `resource="example.com/inference"`)
	rulesFaultWaitLog(t, a, "flag --node-label is deprecated, use --node-labels")
}

// rulesFaultTop is a rules file's first two lines, before any rules.
const rulesFaultTop = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\n"

// rulesFaultGPU is a valid file: every whole GPU is nvidia.com/gpu.
const rulesFaultGPU = rulesFaultHeader + "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n"

// TestFault04RulesFileEmptied: a rules file whose rules are missing, cut
// short after "rules:" or [] (an emptied ConfigMap key, a truncated write)
// is an error in check, explain and run alike; as a hot reload it is
// refused through the invalid-rules path (ERROR line, metric, Warning
// Event) and the last good plan keeps serving. A file that says
// serveNothing: true passes check and, applied, serves nothing.
func TestFault04RulesFileEmptied(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	api := harness.StartAPIServer(t)
	c := &cluster{api: api}
	node := c.node(t, "fault04-emptied", nil)
	rulesFile := rulesFaultWrite(t, shortTempDir(t), "rules.yaml", rulesFaultGPU)
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	a := startAgent(t, agentSpec{Node: node, FakeNode: "dgx-h100", Rules: rulesFile, KubeletDir: kubeletDir,
		Kubeconfig: api.KubeconfigPath, Namespace: agentNamespace})
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 8})

	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want string
	}{
		{"rules missing", rulesFaultTop, ":1: rules: missing: the file would serve no device and withdraw every resource"},
		{"cut short after rules:", rulesFaultTop + "rules:\n", ":3: rules: empty: the file would serve no device and withdraw every resource"},
		{"rules: []", rulesFaultTop + "rules: []\n", ":3: rules: empty: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := rulesFaultWrite(t, dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.content)
			for _, args := range [][]string{
				{"rules", "check", file},
				{"rules", "check", "--fake-node", "dgx-h100", file},
				{"rules", "explain", "--rules", file, "--fake-node", "dgx-h100"},
			} {
				if _, stderr, code := rulesFaultCLI(t, args...); code != 1 || !strings.Contains(stderr, file+tc.want) {
					t.Errorf("featureplug %v: exit %d, stderr:\n%s\nwant exit 1 and %q", args, code, stderr, file+tc.want)
				}
			}
			invalid := a.metric(t, "featureplug_rule_reloads_total", `result="invalid"`)
			writeFileAtomic(t, rulesFile, []byte(tc.content))
			a.waitMetric(t, "featureplug_rule_reloads_total", func(v float64) bool { return v > invalid }, `result="invalid"`)
			rulesFaultWaitLog(t, a, "rules rejected; keeping the last good plan (1 resources)", rulesFile+tc.want)
			if got, _ := peer.Capacity("nvidia.com/gpu"); got != 8 {
				t.Errorf("nvidia.com/gpu capacity %d after the refused reload, want the last plan's 8", got)
			}
			if code, body, err := a.get("/readyz"); err != nil || code != http.StatusOK {
				t.Errorf("/readyz after the refused reload: %d %s %v", code, body, err)
			}
		})
	}
	if err := c.waitEvent(node, "InvalidRules"); err != nil {
		t.Errorf("node %s: %v", node, err)
	}
	if !a.Running() {
		t.Fatalf("featureplug exited: %v\n%s", a.ExitErr(), a.Tail(40))
	}

	// Serving nothing on purpose: check passes, run applies it.
	nothing := rulesFaultTop + "serveNothing: true\n"
	nothingFile := rulesFaultWrite(t, dir, "nothing.yaml", nothing)
	if out, stderr, code := rulesFaultCLI(t, "rules", "check", "--fake-node", "dgx-h100", nothingFile); code != 0 || !strings.Contains(out, "serves nothing (serveNothing: true)") {
		t.Errorf("rules check --fake-node dgx-h100 %s: exit %d\nstdout:\n%s\nstderr:\n%s", nothingFile, code, out, stderr)
	}
	applied := a.metric(t, "featureplug_rule_reloads_total", `result="applied"`)
	writeFileAtomic(t, rulesFile, []byte(nothing))
	a.waitMetric(t, "featureplug_rule_reloads_total", func(v float64) bool { return v > applied }, `result="applied"`)
	rulesFaultWaitAllocatable(t, peer, "nvidia.com/gpu", 0)
	writeFileAtomic(t, rulesFile, []byte(rulesFaultGPU))
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 8})
}

// TestFault08CheckAndRunAgree: for a template invalid on some catalog
// device, `rules check` on the node (--fake-node) and run agree. Hot
// reloads on a running dgx-h100 agent: where the template is valid on the
// node's devices, check on the node passes and names exactly what run then
// serves, while check without a node refuses the file for the catalog's
// +me devices; where a MIG-only template claims none of the node's
// devices, check on the node refuses the file with the reason a running
// agent refuses it (the plan would withdraw every resource). On
// a100-80gb-mixed, check on the node refuses the file for the +me device,
// and run refuses it with the same message, serving none of it.
func TestFault08CheckAndRunAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	dir := t.TempDir()
	renamed := rulesFaultHeader + `- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile }}'
- name: h100
  devices: gpu
  resource: example.com/h100
`
	renamedFile := rulesFaultWrite(t, dir, "renamed.yaml", renamed)
	if _, stderr, code := rulesFaultCLI(t, "rules", "check", renamedFile); code != 1 || !strings.Contains(stderr, `template gives "nvidia.com/mig-1g.10gb+me"`) {
		t.Errorf("rules check %s: exit %d, stderr:\n%s", renamedFile, code, stderr)
	}
	out, stderr, code := rulesFaultCLI(t, "rules", "check", "--fake-node", "dgx-h100", renamedFile)
	if code != 0 || !strings.Contains(out, "serves example.com/h100 (8)") {
		t.Fatalf("rules check --fake-node dgx-h100 %s: exit %d\nstdout:\n%s\nstderr:\n%s", renamedFile, code, out, stderr)
	}
	explained, stderr, code := rulesFaultCLI(t, "rules", "explain", "--rules", renamedFile, "--fake-node", "dgx-h100", "-o", "json")
	if code != 0 {
		t.Fatalf("rules explain: exit %d, stderr:\n%s", code, stderr)
	}
	var plan struct {
		Resources []struct {
			Name    string
			Devices []struct{ ID string }
		}
	}
	if err := json.Unmarshal([]byte(explained), &plan); err != nil || len(plan.Resources) != 1 {
		t.Fatalf("rules explain -o json: %v, %d resources\n%s", err, len(plan.Resources), explained)
	}

	rulesFile := rulesFaultWrite(t, shortTempDir(t), "rules.yaml", rulesFaultGPU)
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	a := startAgent(t, agentSpec{Node: "fault08-agree", FakeNode: "dgx-h100", Rules: rulesFile, KubeletDir: kubeletDir})
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 8})
	applied := a.metric(t, "featureplug_rule_reloads_total", `result="applied"`)
	writeFileAtomic(t, rulesFile, []byte(renamed))
	waitCapacities(t, peer, map[string]int64{"example.com/h100": 8})
	rulesFaultWaitAllocatable(t, peer, "nvidia.com/gpu", 0)
	a.waitMetric(t, "featureplug_rule_reloads_total", func(v float64) bool { return v > applied }, `result="applied"`)
	got := peer.Devices("example.com/h100")
	for _, d := range plan.Resources[0].Devices {
		if got[d.ID] == nil {
			t.Errorf("run does not serve %s, which check and explain on the node say it serves", d.ID)
		}
	}
	if len(got) != len(plan.Resources[0].Devices) {
		t.Errorf("run serves %d devices of example.com/h100, check and explain on the node %d", len(got), len(plan.Resources[0].Devices))
	}

	// A MIG-only template claims none of dgx-h100's devices: check on the
	// node refuses the file with the reason a running agent refuses it.
	migOnly := rulesFaultWrite(t, dir, "mig-only.yaml", rulesFaultHeader+"- name: mig\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n")
	for _, args := range [][]string{{"rules", "check", migOnly}, {"rules", "check", "--fake-node", "dgx-h100", migOnly}} {
		if _, stderr, code := rulesFaultCLI(t, args...); code != 1 {
			t.Errorf("featureplug %v: exit %d, want 1; stderr:\n%s", args, code, stderr)
		}
	}
	if _, stderr, _ := rulesFaultCLI(t, "rules", "check", "--fake-node", "dgx-h100", migOnly); !strings.Contains(stderr,
		"on fake node dgx-h100: the plan serves no device: none of the node's 8 GPUs and MIG devices goes to a resource (no rule claims any of them)") {
		t.Errorf("rules check --fake-node dgx-h100 %s: stderr:\n%s", migOnly, stderr)
	}

	// On a node with a +me device, check on the node refuses the file,
	// and an agent started with it serves none of its devices, logging
	// check's very message.
	migFile := rulesFaultWrite(t, dir, "mig.yaml", rulesFaultMIG)
	_, stderr, code = rulesFaultCLI(t, "rules", "check", "--fake-node", "a100-80gb-mixed", migFile)
	message := rulesFaultLine(stderr, rulesFaultMIGMessage)
	if code != 1 || message == "" {
		t.Fatalf("rules check --fake-node a100-80gb-mixed %s: exit %d, stderr:\n%s\nwant %q", migFile, code, stderr, rulesFaultMIGMessage)
	}
	mixedDir := shortTempDir(t)
	mixedPeer := harness.StartKubeletPeer(t, mixedDir)
	mixed := startAgent(t, agentSpec{Node: "fault08-agree-mixed", FakeNode: "a100-80gb-mixed", Rules: migFile, KubeletDir: mixedDir})
	// The log's text handler quotes the value, escaping its quotes.
	rulesFaultWaitLog(t, mixed, "rules rejected; keeping", strings.ReplaceAll(message, `"`, `\"`))
	for _, res := range []string{"nvidia.com/gpu", "nvidia.com/mig-3g.40gb"} {
		if c, al := mixedPeer.Capacity(res); c != 0 || al != 0 {
			t.Errorf("kubelet capacity of %s = %d (%d allocatable) under rules check refuses on the node, want 0", res, c, al)
		}
	}
}
