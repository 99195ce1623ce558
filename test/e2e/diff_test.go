package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/test/harness"
)

// diffReport is `featureplug rules diff -o json` as a CI job reads it.
type diffReport struct {
	ExitCode      int    `json:"exitCode"`
	Status        string `json:"status"`
	Error         string `json:"error"`
	Rules         string `json:"rules"`
	RulesDigest   string `json:"rulesDigest"`
	Baseline      string `json:"baseline"`
	Current       string `json:"current"`
	CurrentDigest string `json:"currentDigest"`
	ConfigMap     *struct {
		Name   string `json:"name"`
		Key    string `json:"key"`
		Digest string `json:"digest"`
		Error  string `json:"error"`
	} `json:"configMap"`
	Policy struct {
		AllowLoss     bool     `json:"allowLoss"`
		AllowLossOf   []string `json:"allowLossOf"`
		FailOnWarning bool     `json:"failOnWarning"`
	} `json:"policy"`
	Selector      string      `json:"selector"`
	Nodes         int         `json:"nodes"`
	BlockedNodes  int         `json:"blockedNodes"`
	Warnings      []string    `json:"warnings"`
	Groups        []diffGroup `json:"groups"`
	DeviceClasses []struct {
		Op       string `json:"op"`
		Resource string `json:"resource"`
		Class    string `json:"class"`
		From     string `json:"from"`
		To       string `json:"to"`
	} `json:"deviceClasses"`
	WithoutAgent []string `json:"withoutAgent"`
	Incomplete   []struct {
		Reason string   `json:"reason"`
		Nodes  []string `json:"nodes"`
	} `json:"incomplete"`
}

type diffGroup struct {
	Nodes     []string     `json:"nodes"`
	Runs      string       `json:"runs"`
	Digest    string       `json:"digest"`
	Blocked   bool         `json:"blocked"`
	Changes   []diffChange `json:"changes"`
	Unclaimed []diffDevice `json:"unclaimed"`
	Problems  []diffDevice `json:"problems"`
	Error     string       `json:"error"`
	Warnings  []string     `json:"warnings"`
}

type diffChange struct {
	Op       string        `json:"op"`
	Resource string        `json:"resource"`
	From     *diffResource `json:"from"`
	To       *diffResource `json:"to"`
	Loss     bool          `json:"loss"`
	Allowed  bool          `json:"allowed"`
	Blocking bool          `json:"blocking"`
	Reason   string        `json:"reason"`
}

type diffResource struct {
	Devices  int    `json:"devices"`
	Capacity int    `json:"capacity"`
	Sharing  string `json:"sharing"`
	Serve    string `json:"serve"`
}

type diffDevice struct {
	Index       string            `json:"index"`
	Kind        string            `json:"kind"`
	Profile     string            `json:"profile"`
	Description string            `json:"description"`
	Was         string            `json:"was"`
	Rule        string            `json:"rule"`
	Resource    string            `json:"resource"`
	Message     string            `json:"message"`
	UUIDs       map[string]string `json:"uuids"`
}

// diffStatus is the status of each exit code.
var diffStatus = map[int]string{0: "pass", 1: "blocked", 2: "invalid", 3: "incomplete"}

// runDiff runs `featureplug rules diff -o json ARGS`, checks that it exits
// with code and prints exactly one report saying so (with an error exactly
// when it fails), and returns it.
func runDiff(t *testing.T, code int, args ...string) *diffReport {
	t.Helper()
	out := explainRun(t, code, append([]string{"rules", "diff", "-o", "json"}, args...)...)
	var rep diffReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("rules diff -o json %q: %v:\n%s", args, err, out)
	}
	if dec.More() {
		t.Errorf("rules diff -o json %q: more than one object:\n%s", args, out)
	}
	if rep.ExitCode != code || rep.Status != diffStatus[code] || (rep.Error != "") != (code != 0) {
		t.Errorf("rules diff %q: report says exit %d (%s), error %q; the command exited %d", args, rep.ExitCode, rep.Status, rep.Error, code)
	}
	for _, g := range rep.Groups {
		for _, c := range g.Changes {
			if c.Op == "" {
				t.Errorf("rules diff %q: a change without op: %+v", args, c)
			}
		}
	}
	return &rep
}

// group returns the group of a node.
func (rep *diffReport) group(t *testing.T, node string) *diffGroup {
	t.Helper()
	for i := range rep.Groups {
		if slices.Contains(rep.Groups[i].Nodes, node) {
			return &rep.Groups[i]
		}
	}
	t.Fatalf("no group has node %s:\n%s", node, explainJSON(rep))
	return nil
}

// ops lists a group's changes as "op resource", "!" marking a blocking
// loss and "~" an allowed one.
func (g *diffGroup) ops() []string {
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

// diffGateNode is one node of TestRulesDiffGate.
type diffGateNode struct {
	name, kind, fake, rules string
	// dra runs the agent with the DRA directories, so that rules with
	// serve: dra are served.
	dra bool
}

// TestRulesDiffGate runs `rules diff` as a CI gate against
// kube-apiserver, nfd-master and agents on fake nodes, one subtest for
// each way it used to let a change through or fail without telling why:
// the ConfigMap already holding the proposed rules while the agents run
// older ones; serve: dra; a partial loss; exit codes that tell a blocked
// change from a broken pipeline; a selector that matches nothing; JSON
// that tools can read; noisy or wrong text.
func TestRulesDiffGate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master and four agents")
	}
	c := startCluster(t)
	api := c.api
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	testdata := filepath.Join(build.root, "test", "e2e", "testdata")
	agentsRules := filepath.Join(testdata, "diff-agents.yaml")
	partial := filepath.Join(testdata, "diff-partial.yaml")
	draRules := filepath.Join(testdata, "diff-dra.yaml")
	renamed := filepath.Join(testdata, "diff-renamed.yaml")
	read := func(path string) []byte {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	agentsDigest, partialDigest := explainDigest(read(agentsRules)), explainDigest(read(partial))
	// The proposed rules are already in the ConfigMap: the agents have
	// not picked them up (a failed rollout, a paused GitOps sync).
	if _, err := api.Client.CoreV1().ConfigMaps(agentNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "featureplug-rules", Namespace: agentNamespace},
		Data:       map[string]string{"rules.yaml": string(read(partial))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	nodes := []diffGateNode{
		{name: "gate-a100", kind: "a100", fake: "dgx-a100", rules: agentsRules},
		{name: "gate-h100", kind: "h100", fake: "dgx-h100", rules: agentsRules},
		{name: "gate-builtin", kind: "builtin", fake: "dgx-a100", rules: "mixed"},
		{name: "gate-dra", kind: "dra", fake: "dgx-h100", rules: draRules, dra: true},
	}
	for _, n := range nodes {
		c.node(t, n.name, map[string]string{"gate": "true", "gate-kind": n.kind})
		spec := agentSpec{Node: n.name, FakeNode: n.fake, Publish: "nodefeature", Rules: n.rules,
			Kubeconfig: api.KubeconfigPath, Namespace: agentNamespace}
		if n.dra {
			dir := shortTempDir(t)
			for _, d := range []string{"reg", "dra", "cdi"} {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			spec.Extra = []string{"--kubelet-registry-dir", filepath.Join(dir, "reg"), "--dra-plugin-dir", filepath.Join(dir, "dra"),
				"--cdi-spec-dir", filepath.Join(dir, "cdi")}
		}
		startAgent(t, spec)
	}
	for _, name := range []string{"gate-cpu-1", "gate-cpu-2"} {
		c.node(t, name, map[string]string{"gate": "true", "gate-kind": "cpu"})
	}
	served := map[string]string{
		"gate-a100":    "example.com/a100=4,nvidia.com/mig-1g.5gb=6,nvidia.com/mig-2g.10gb=8,nvidia.com/mig-3g.20gb=2",
		"gate-h100":    "example.com/h100=8",
		"gate-builtin": "nvidia.com/gpu=4,nvidia.com/mig-1g.5gb=6,nvidia.com/mig-2g.10gb=8,nvidia.com/mig-3g.20gb=2",
		"gate-dra":     "example.com/h100=8",
	}
	digests := map[string]string{"gate-a100": agentsDigest, "gate-h100": agentsDigest, "gate-builtin": "builtin:mixed",
		"gate-dra": explainDigest(read(draRules))}
	for _, n := range nodes {
		explainWaitAnnotations(t, c, n.name, digests[n.name], served[n.name])
	}
	kubeconfig := []string{"--kubeconfig", api.KubeconfigPath}
	gate := append([]string{"-l", "gate=true"}, kubeconfig...)

	t.Run("ServedAnnotationRecordsTheAPI", func(t *testing.T) {
		for node, want := range map[string]string{"gate-h100": "device-plugin", "gate-dra": "dra"} {
			s := explainServed(t, c, node)
			if s.DefaultServe != "device-plugin" || len(s.Resources) != 1 || s.Resources[0].Serve != want ||
				!reflect.DeepEqual(s.Resources[0].Devices, []string{"0", "1", "2", "3", "4", "5", "6", "7"}) {
				t.Errorf("%s: %s: %+v, want example.com/h100 on 8 devices through %s", node, explainResourcesAnnotation, s, want)
			}
		}
	})

	t.Run("StaleConfigMap", func(t *testing.T) {
		rep := runDiff(t, 1, append([]string{"--rules", partial}, gate...)...)
		if rep.Baseline != "served" || rep.ConfigMap == nil || rep.ConfigMap.Digest != partialDigest {
			t.Errorf("baseline %q, configMap %+v", rep.Baseline, rep.ConfigMap)
		}
		a100 := rep.group(t, "gate-a100")
		if a100.Runs != "other" || a100.Digest != agentsDigest || !reflect.DeepEqual(a100.ops(), []string{"removed example.com/a100 !"}) {
			t.Errorf("gate-a100 against the ConfigMap's own rules: %s", explainJSON(a100))
		}
		out := explainRun(t, 1, append([]string{"rules", "diff", "--rules", partial}, gate...)...)
		if want := "  runs      other rules (" + agentsDigest + ") than the ConfigMap (" + partialDigest + ")\n  - example.com/a100: 4 devices  [loss: blocks]\n"; !strings.Contains(out, want) {
			t.Errorf("the table does not show the stale node's loss (%q):\n%s", want, out)
		}
		// A node on the builtin "mixed" against a file that renames
		// everything loses every resource it serves.
		rep = runDiff(t, 1, append([]string{"--rules", renamed, "-l", "gate-kind=builtin"}, kubeconfig...)...)
		want := []string{"added example.com/gpu", "added example.com/mig-1g.5gb", "added example.com/mig-2g.10gb", "added example.com/mig-3g.20gb",
			"removed nvidia.com/gpu !", "removed nvidia.com/mig-1g.5gb !", "removed nvidia.com/mig-2g.10gb !", "removed nvidia.com/mig-3g.20gb !"}
		if g := rep.group(t, "gate-builtin"); g.Runs != "other" || g.Digest != "builtin:mixed" || !reflect.DeepEqual(g.ops(), want) {
			t.Errorf("gate-builtin against renamed rules: %s", explainJSON(g))
		}
	})

	t.Run("ServeDRA", func(t *testing.T) {
		sel := append([]string{"-l", "gate-kind in (h100,dra)"}, kubeconfig...)
		rep := runDiff(t, 1, append([]string{"--rules", draRules}, sel...)...)
		h100 := rep.group(t, "gate-h100")
		if len(h100.Changes) != 1 {
			t.Fatalf("gate-h100: %s", explainJSON(h100))
		}
		if ch := h100.Changes[0]; ch.Op != "serve-changed" || ch.From.Serve != "device-plugin" || ch.To.Serve != "dra" || !ch.Blocking ||
			!strings.Contains(ch.Reason, "no DeviceClass in the cluster has extendedResourceName example.com/h100") {
			t.Errorf("serve: dra on gate-h100: %s", explainJSON(ch))
		}
		if g := rep.group(t, "gate-dra"); g.Runs != "proposed" || len(g.Changes) != 0 {
			t.Errorf("gate-dra runs the proposed rules: %s", explainJSON(g))
		}
		if len(rep.DeviceClasses) != 1 || rep.DeviceClasses[0].Op != "deviceclass-added" || rep.DeviceClasses[0].Class != "h100.example.com.featureplug.io" {
			t.Errorf("deviceClasses: %s", explainJSON(rep.DeviceClasses))
		}
		// With the DeviceClasses applied, pods asking for
		// example.com/h100 are served through DRA: nothing is lost.
		diffApplyClasses(t, api, draRules)
		rep = runDiff(t, 0, append([]string{"--rules", draRules}, sel...)...)
		if ch := rep.group(t, "gate-h100").Changes; len(ch) != 1 || ch[0].Op != "serve-changed" || ch[0].Loss {
			t.Errorf("serve: dra with the DeviceClass applied: %s", explainJSON(ch))
		}
		if len(rep.DeviceClasses) != 0 {
			t.Errorf("deviceClasses after applying them: %s", explainJSON(rep.DeviceClasses))
		}
		// And back: the DRA node's resource returns to the device plugins.
		rep = runDiff(t, 0, append([]string{"--rules", agentsRules, "-l", "gate-kind=dra"}, kubeconfig...)...)
		if ch := rep.group(t, "gate-dra").Changes; len(ch) != 1 || ch[0].Op != "serve-changed" || ch[0].From.Serve != "dra" || ch[0].To.Serve != "device-plugin" {
			t.Errorf("gate-dra back to device plugins: %s", explainJSON(ch))
		}
	})

	t.Run("PartialLoss", func(t *testing.T) {
		sel := append([]string{"-l", "gate-kind in (a100,h100)"}, kubeconfig...)
		rep := runDiff(t, 1, append([]string{"--rules", partial}, sel...)...)
		a100 := rep.group(t, "gate-a100")
		if !reflect.DeepEqual(a100.ops(), []string{"removed example.com/a100 !"}) || len(a100.Unclaimed) != 4 {
			t.Fatalf("gate-a100: %s", explainJSON(a100))
		}
		uuids := explainFeatureUUIDs(t, c, "gate-a100")
		if d := a100.Unclaimed[0]; d.Index != "4" || d.Kind != "gpu" || d.Was != "example.com/a100" || d.UUIDs["gate-a100"] != uuids["4"] {
			t.Errorf("first unclaimed device %+v, want GPU 4 (%s)", d, uuids["4"])
		}
		h100 := rep.group(t, "gate-h100")
		if !reflect.DeepEqual(h100.ops(), []string{"sharing-changed example.com/h100"}) || h100.Changes[0].To.Capacity != 32 || h100.Blocked {
			t.Errorf("gate-h100: %s", explainJSON(h100))
		}
		if !strings.Contains(rep.Error, "1 node would lose resources (example.com/a100)") {
			t.Errorf("error %q", rep.Error)
		}
		rep = runDiff(t, 0, append([]string{"--rules", partial, "--allow-loss-of", "example.com/a100"}, sel...)...)
		if g := rep.group(t, "gate-a100"); !reflect.DeepEqual(g.ops(), []string{"removed example.com/a100 ~"}) {
			t.Errorf("allowed loss: %q", g.ops())
		}
		runDiff(t, 0, append([]string{"--rules", partial, "--allow-loss"}, sel...)...)
		runDiff(t, 1, append([]string{"--rules", partial, "--allow-loss-of", "nvidia.com/*"}, sel...)...)
	})

	t.Run("ExitCodes", func(t *testing.T) {
		if rep := runDiff(t, 0, append([]string{"--rules", agentsRules, "-l", "gate-kind in (a100,h100)"}, kubeconfig...)...); len(rep.Groups) != 1 || len(rep.Groups[0].Changes) != 0 {
			t.Errorf("the rules the nodes run: %s", explainJSON(rep.Groups))
		}
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"invalid file", []string{"--rules", filepath.Join(testdata, "diff-invalid.yaml")}, "diff-invalid.yaml"},
			{"missing file", []string{"--rules", filepath.Join(testdata, "nonexistent.yaml")}, "nonexistent.yaml"},
			{"bad selector", []string{"--rules", partial, "-l", "gate in ("}, `--selector "gate in ("`},
			{"unknown flag", []string{"--rules", partial, "--allow-all"}, "unknown flag: --allow-all"},
			{"missing ConfigMap", []string{"--rules", partial, "--current", "configmap", "--configmap", "nope"},
				"give the rules to compare with as --current FILE"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if rep := runDiff(t, 2, append(tc.args, kubeconfig...)...); !strings.Contains(rep.Error, tc.want) {
					t.Errorf("error %q, want %q", rep.Error, tc.want)
				}
			})
		}
		t.Run("unreachable", func(t *testing.T) {
			port, err := harness.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(t.TempDir(), "kubeconfig")
			if err := os.WriteFile(cfg, fmt.Appendf(nil, "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:%d\"}\n"+
				"contexts:\n- name: c\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: x}\ncurrent-context: c\n", port), 0o600); err != nil {
				t.Fatal(err)
			}
			if rep := runDiff(t, 3, "--rules", partial, "--kubeconfig", cfg, "--request-timeout", "5s"); !strings.Contains(rep.Error, "connection refused") {
				t.Errorf("error %q", rep.Error)
			}
		})
		t.Run("incomplete", func(t *testing.T) {
			// A NodeFeature that records nothing served: an agent
			// that has not applied rules yet.
			c.node(t, "gate-fresh", map[string]string{"gate-kind": "fresh"})
			nf, err := api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace).Get(ctx, nodeFeatureName("gate-h100"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fresh := &nfdv1alpha1.NodeFeature{ObjectMeta: metav1.ObjectMeta{Name: nodeFeatureName("gate-fresh"), Namespace: agentNamespace,
				Labels: map[string]string{nfdv1alpha1.NodeFeatureObjNodeNameLabel: "gate-fresh", "app.kubernetes.io/managed-by": "featureplug"}},
				Spec: nf.Spec}
			if _, err := api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace).Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			rep := runDiff(t, 3, append([]string{"--rules", agentsRules, "-l", "gate-kind in (h100,fresh)"}, kubeconfig...)...)
			if len(rep.Incomplete) != 1 || !reflect.DeepEqual(rep.Incomplete[0].Nodes, []string{"gate-fresh"}) ||
				!strings.Contains(rep.Incomplete[0].Reason, "records nothing served") {
				t.Errorf("incomplete: %s", explainJSON(rep.Incomplete))
			}
			// A loss on the other nodes blocks all the same.
			runDiff(t, 1, append([]string{"--rules", partial, "-l", "gate-kind in (a100,fresh)"}, kubeconfig...)...)
		})
	})

	t.Run("SelectorMatchesNoNode", func(t *testing.T) {
		if rep := runDiff(t, 2, append([]string{"--rules", partial, "-l", "nomatch=x"}, kubeconfig...)...); !strings.Contains(rep.Error, `--selector "nomatch=x" matches no Node`) {
			t.Errorf("error %q", rep.Error)
		}
	})

	t.Run("JSONDevices", func(t *testing.T) {
		// The builtin "none" gives MIG devices no resource.
		rep := runDiff(t, 1, append([]string{"--rules", "none", "-l", "gate-kind=a100"}, kubeconfig...)...)
		g := rep.group(t, "gate-a100")
		uuids := explainFeatureUUIDs(t, c, "gate-a100")
		migs := 0
		for _, d := range g.Unclaimed {
			if d.Kind != "mig" {
				continue
			}
			migs++
			if d.Profile == "" || !strings.Contains(d.Index, ":") || d.UUIDs["gate-a100"] != uuids[d.Index] || d.UUIDs["gate-a100"] == "" {
				t.Errorf("MIG device %+v: want index, profile and UUID %s", d, uuids[d.Index])
			}
		}
		if migs != 16 {
			t.Errorf("%d MIG devices lose their resource, want 16: %s", migs, explainJSON(g.Unclaimed))
		}
		// A failure before any node is read is one object too.
		if rep := runDiff(t, 2, "--rules", "/nonexistent/new.yaml"); rep.Rules != "" || len(rep.Groups) != 0 {
			t.Errorf("report of a missing file: %s", explainJSON(rep))
		}
	})

	t.Run("Text", func(t *testing.T) {
		out := explainRun(t, 1, append([]string{"rules", "diff", "--rules", partial}, kubeconfig...)...)
		for _, want := range []string{
			"\ngate-a100 (1 node)\n",
			"Without an agent (3 nodes): gate-cpu-1, gate-cpu-2, " + nfdMasterNode + "\n",
			"Result: blocked (exit 1)\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		for _, wrong := range []string{"1 nodes", "1 outcomes", "runs      unknown rules", "  note "} {
			if strings.Contains(out, wrong) {
				t.Errorf("table says %q:\n%s", wrong, out)
			}
		}
		// explain --node says only what applies: the table has no
		// links, the rules select no nodes, the node runs them.
		stderr := explainRunStderr(t, 0, "rules", "explain", "--node", "gate-h100", "--rules", agentsRules, "--kubeconfig", api.KubeconfigPath)
		if strings.Contains(stderr, "note:") {
			t.Errorf("rules explain --node prints notes that do not apply:\n%s", stderr)
		}
	})
}

// diffApplyClasses creates the DeviceClasses `featureplug dra classes`
// makes of a rules file, as `| kubectl apply -f -` would.
func diffApplyClasses(t *testing.T, api *harness.APIServer, rulesFile string) {
	t.Helper()
	out := explainRun(t, 0, "dra", "classes", "--rules", rulesFile, "-o", "json")
	var list struct {
		Items []resourceapi.DeviceClass `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("dra classes: %v:\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for i := range list.Items {
		if _, err := api.Client.ResourceV1().DeviceClasses().Create(ctx, &list.Items[i], metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating DeviceClass %s: %v", list.Items[i].Name, err)
		}
	}
}

// explainFeatureUUIDs reads the UUIDs of a node's GPUs and MIG devices
// from its NodeFeature, by device index ("4", "0:2").
func explainFeatureUUIDs(t *testing.T, c *cluster, node string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nf, err := c.api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace).Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range nf.Spec.Features.Instances["nvidia.gpu"].Elements {
		out[e.Attributes["index"]] = e.Attributes["uuid"]
	}
	for _, e := range nf.Spec.Features.Instances["nvidia.mig"].Elements {
		out[e.Attributes["parent.index"]+":"+e.Attributes["index"]] = e.Attributes["uuid"]
	}
	return out
}

// explainRunStderr runs the featureplug binary and returns its stderr; it
// fails the test unless it exits with code.
func explainRunStderr(t *testing.T, code int, args ...string) string {
	t.Helper()
	var stderr string
	explainRunWith(t, code, func(_, errOut string) { stderr = errOut }, args...)
	return stderr
}

// diffServedCounts is the "name=count,..." summary of a
// featureplug.io/resources value (either form), as the waits compare it.
func diffServedCounts(t *testing.T, value string) string {
	t.Helper()
	if !strings.HasPrefix(value, "{") {
		return value
	}
	var s explainServedValue
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		t.Fatalf("%s: %v: %s", explainResourcesAnnotation, err, value)
	}
	parts := make([]string, len(s.Resources))
	for i, r := range s.Resources {
		parts[i] = r.Name + "=" + strconv.Itoa(r.Count)
	}
	return strings.Join(parts, ",")
}
