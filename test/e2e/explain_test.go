package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// Annotations and the Event reason the agent records (cmd/internal/agent
// explain.go), written out here as an admin reads them.
const (
	explainDigestAnnotation    = "featureplug.io/rules-digest"
	explainResourcesAnnotation = "featureplug.io/resources"
	explainEventReason         = "ResourcesChanged"
)

// explainNode is one simulated node of TestExplainCluster.
type explainNode struct {
	name, fake string
	agent      *agent
}

// TestExplainCluster runs agents on three kinds of node (a DGX A100 with
// MIG, a DGX H100, a workstation) against kube-apiserver and nfd-master,
// with the rules of the agents' ConfigMap ("mixed"), and checks from the
// cluster alone: `rules explain --node` prints what `rules explain
// --fake-node` prints on each node; `rules diff` of a hand-written edit
// shows exactly the expected changes per node against what they serve and
// blocks the edit's losses; after the edit reaches the running agents, each
// Node has a ResourcesChanged Event and each NodeFeature the new digest and
// resources, which `rules diff` then reads.
func TestExplainCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master and three agents")
	}
	c := startCluster(t)
	api := c.api
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	mixed, err := os.ReadFile(filepath.Join(build.root, "rules", "builtin", "mixed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The agents' rules: one file, as a ConfigMap mounts it on every node,
	// and the ConfigMap itself, as the manifests install it.
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFileAtomic(t, rulesFile, mixed)
	if _, err := api.Client.CoreV1().ConfigMaps(agentNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "featureplug-rules", Namespace: agentNamespace},
		Data:       map[string]string{"rules.yaml": string(mixed)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	nodes := []*explainNode{
		{name: "explain-dgx-a100", fake: "dgx-a100"},
		{name: "explain-dgx-h100", fake: "dgx-h100"},
		{name: "explain-workstation", fake: "workstation"},
	}
	for _, n := range nodes {
		c.node(t, n.name, map[string]string{"explain": "true"})
		n.agent = startAgent(t, agentSpec{
			Node: n.name, FakeNode: n.fake, Publish: "nodefeature", Rules: rulesFile,
			Kubeconfig: api.KubeconfigPath, Namespace: agentNamespace,
		})
	}
	mixedResources := map[string]string{
		"explain-dgx-a100":    "nvidia.com/gpu=4,nvidia.com/mig-1g.5gb=6,nvidia.com/mig-2g.10gb=8,nvidia.com/mig-3g.20gb=2",
		"explain-dgx-h100":    "nvidia.com/gpu=8",
		"explain-workstation": "nvidia.com/gpu=1",
	}
	for _, n := range nodes {
		explainWaitAnnotations(t, c, n.name, explainDigest(mixed), mixedResources[n.name])
		// nfd-master has seen the features when the labels are there.
		c.waitLabels(t, n.name, map[string]string{"nvidia.com/gpu.present": "true"})
	}

	t.Run("ExplainNodeEqualsLocal", func(t *testing.T) {
		for _, n := range nodes {
			for _, format := range []string{"table", "json"} {
				local := explainRun(t, 0, "rules", "explain", "--rules", rulesFile, "--fake-node", n.fake, "-o", format)
				remote := explainRun(t, 0, "rules", "explain", "--node", n.name, "--rules", rulesFile, "--kubeconfig", api.KubeconfigPath, "-o", format)
				if format == "json" {
					local, remote = explainDropLinks(t, local), explainDropLinks(t, remote)
				}
				if local != remote {
					t.Errorf("%s, -o %s: rules explain --node differs from the node's own:\n--- on the node\n%s\n--- from the cluster\n%s",
						n.name, format, local, remote)
				}
			}
		}
		// Without --rules: the ConfigMap's rules, the same explanation
		// after its first line (which names where the rules came from).
		local := explainRun(t, 0, "rules", "explain", "--rules", rulesFile, "--fake-node", "dgx-a100")
		remote := explainRun(t, 0, "rules", "explain", "--node", "explain-dgx-a100", "--kubeconfig", api.KubeconfigPath)
		_, localRest, _ := strings.Cut(local, "\n")
		first, remoteRest, _ := strings.Cut(remote, "\n")
		if first != "Rules: configmap featureplug/featureplug-rules rules.yaml" || localRest != remoteRest {
			t.Errorf("rules explain --node with the ConfigMap's rules:\n%s\nwant after its first line:\n%s", remote, localRest)
		}
	})

	edit := filepath.Join(build.root, "test", "e2e", "testdata", "explain-edit.yaml")
	broken := filepath.Join(build.root, "test", "e2e", "testdata", "explain-break.yaml")
	editData, err := os.ReadFile(edit)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("DiffEdit", func(t *testing.T) {
		// What the nodes serve is what the ConfigMap's rules give: the
		// edit takes the A100s' nvidia.com/gpu and 1g.5gb slices away.
		got := runDiff(t, 1, "--rules", edit, "--kubeconfig", api.KubeconfigPath)
		if got.Rules != edit || got.RulesDigest != explainDigest(editData) || got.Baseline != "served" ||
			got.ConfigMap == nil || got.ConfigMap.Digest != explainDigest(mixed) || got.Nodes != 4 || got.BlockedNodes != 1 ||
			!reflect.DeepEqual(got.WithoutAgent, []string{nfdMasterNode}) || len(got.Groups) != 3 {
			t.Fatalf("rules diff:\n%s", explainJSON(got))
		}
		a100 := got.group(t, "explain-dgx-a100")
		if a100.Runs != "configmap" || !reflect.DeepEqual(a100.ops(), []string{"added example.com/a100-40gb", "removed nvidia.com/gpu !", "removed nvidia.com/mig-1g.5gb !"}) {
			t.Errorf("DGX A100: %s", explainJSON(a100))
		}
		var unclaimed []string
		for _, d := range a100.Unclaimed {
			unclaimed = append(unclaimed, d.Description+": was "+d.Was)
		}
		if want := []string{
			"GPU 0 MIG 2 (1g.5gb): was nvidia.com/mig-1g.5gb", "GPU 0 MIG 3 (1g.5gb): was nvidia.com/mig-1g.5gb",
			"GPU 1 MIG 2 (1g.5gb): was nvidia.com/mig-1g.5gb", "GPU 1 MIG 3 (1g.5gb): was nvidia.com/mig-1g.5gb",
			"GPU 2 MIG 3 (1g.5gb): was nvidia.com/mig-1g.5gb", "GPU 3 MIG 3 (1g.5gb): was nvidia.com/mig-1g.5gb",
		}; !reflect.DeepEqual(unclaimed, want) {
			t.Errorf("DGX A100 devices without a resource: %q, want %q", unclaimed, want)
		}
		for node, devices := range map[string]int{"explain-dgx-h100": 8, "explain-workstation": 1} {
			g := got.group(t, node)
			if g.Runs != "configmap" || !reflect.DeepEqual(g.ops(), []string{"sharing-changed nvidia.com/gpu"}) ||
				*g.Changes[0].To != (diffResource{Devices: devices, Capacity: 2 * devices, Sharing: "time-slicing x2", Serve: "device-plugin"}) {
				t.Errorf("%s: %s", node, explainJSON(g))
			}
		}
	})

	t.Run("DiffLeavesWorkstationWithNothing", func(t *testing.T) {
		got := runDiff(t, 1, "--rules", broken, "--kubeconfig", api.KubeconfigPath, "--selector", "explain=true")
		if g := got.group(t, "explain-workstation"); !g.Blocked || !reflect.DeepEqual(g.ops(), []string{"removed nvidia.com/gpu !"}) {
			t.Errorf("workstation: %s", explainJSON(g))
		}
		out := explainRun(t, 1, "rules", "diff", "--rules", broken, "--kubeconfig", api.KubeconfigPath)
		if !strings.Contains(out, "explain-workstation (1 node)\n  runs      the ConfigMap's rules\n  - nvidia.com/gpu: 1 device  [loss: blocks]\n"+
			"  no resource  GPU 0 NVIDIA L4 (GPU-") || !strings.Contains(out, "): was nvidia.com/gpu\n  BLOCKED\n") {
			t.Errorf("the table does not show the workstation losing its GPU:\n%s", out)
		}
	})

	t.Run("RulesChangeOnRunningAgents", func(t *testing.T) {
		writeFileAtomic(t, rulesFile, editData)
		changes := map[string]string{
			"explain-dgx-a100": "example.com/a100-40gb: 0 -> 4 devices, rule a100-by-model; nvidia.com/gpu: 4 -> 0 devices, rule gpu; " +
				"nvidia.com/mig-1g.5gb: 6 -> 0 devices, rule mig",
			"explain-dgx-h100":    "nvidia.com/gpu: 8 -> 8 devices, sharing none -> time-slicing x2, rule gpu",
			"explain-workstation": "nvidia.com/gpu: 1 -> 1 devices, sharing none -> time-slicing x2, rule gpu",
		}
		resources := map[string]string{
			"explain-dgx-a100":    "example.com/a100-40gb=4,nvidia.com/mig-2g.10gb=8,nvidia.com/mig-3g.20gb=2",
			"explain-dgx-h100":    "nvidia.com/gpu=8",
			"explain-workstation": "nvidia.com/gpu=1",
		}
		// The first plan's Event, then the edit's.
		first := map[string]string{
			"explain-dgx-a100": "nvidia.com/gpu: 0 -> 4 devices, rule gpu; nvidia.com/mig-1g.5gb: 0 -> 6 devices, rule mig; " +
				"nvidia.com/mig-2g.10gb: 0 -> 8 devices, rule mig; nvidia.com/mig-3g.20gb: 0 -> 2 devices, rule mig",
			"explain-dgx-h100":    "nvidia.com/gpu: 0 -> 8 devices, rule gpu",
			"explain-workstation": "nvidia.com/gpu: 0 -> 1 devices, rule gpu",
		}
		for _, n := range nodes {
			explainWaitAnnotations(t, c, n.name, explainDigest(editData), resources[n.name])
			explainWaitEvent(t, c, n.name, first[n.name])
			explainWaitEvent(t, c, n.name, changes[n.name])
		}
		// The ConfigMap still holds "mixed": the nodes serve the new
		// rules already, and the diff says so.
		got := runDiff(t, 0, "--rules", edit, "--kubeconfig", api.KubeconfigPath, "--selector", "explain=true")
		if len(got.Groups) != 1 || len(got.Groups[0].Nodes) != 3 {
			t.Errorf("%d groups, want one of the three nodes: %s", len(got.Groups), explainJSON(got))
		}
		for _, g := range got.Groups {
			if g.Runs != "proposed" || len(g.Changes) != 0 {
				t.Errorf("nodes %v after the edit: runs %q rules, changes %q; want the proposed, no change", g.Nodes, g.Runs, g.ops())
			}
		}
	})
}

// explainDigest is the digest the agent records for a rules file's content.
func explainDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// explainRun runs the featureplug binary and returns its stdout; it fails
// the test unless it exits with code.
func explainRun(t *testing.T, code int, args ...string) string {
	t.Helper()
	return explainRunWith(t, code, nil, args...)
}

// explainRunWith is explainRun that also hands both outputs to seen (when
// set).
func explainRunWith(t *testing.T, code int, seen func(stdout, stderr string), args ...string) string {
	t.Helper()
	cmd := exec.Command(build.agent, args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		t.Fatalf("featureplug %s: %v", strings.Join(args, " "), err)
	}
	if got != code {
		t.Fatalf("featureplug %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, out.String(), errOut.String())
	}
	if seen != nil {
		seen(out.String(), errOut.String())
	}
	return out.String()
}

// explainDropLinks drops the link matrix from a JSON explanation: the
// cluster does not hold it (the command says so on stderr).
func explainDropLinks(t *testing.T, s string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v:\n%s", err, s)
	}
	delete(m, "links")
	return explainJSON(m)
}

func explainJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// explainServedValue is the featureplug.io/resources annotation as an
// admin reads it with kubectl.
type explainServedValue struct {
	DefaultServe string                  `json:"defaultServe"`
	Resources    []explainServedResource `json:"resources"`
}

type explainServedResource struct {
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Serve   string `json:"serve"`
	Sharing *struct {
		Strategy                   string `json:"strategy"`
		Replicas                   int    `json:"replicas"`
		FailRequestsGreaterThanOne bool   `json:"failRequestsGreaterThanOne"`
	} `json:"sharing,omitempty"`
	Devices []string `json:"devices"`
}

// explainServed reads what a node's NodeFeature records it serves.
func explainServed(t *testing.T, c *cluster, node string) explainServedValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nf, err := c.api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace).Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var s explainServedValue
	dec := json.NewDecoder(strings.NewReader(nf.Annotations[explainResourcesAnnotation]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("%s of %s: %v: %q", explainResourcesAnnotation, node, err, nf.Annotations[explainResourcesAnnotation])
	}
	return s
}

// explainWaitAnnotations waits until the node's NodeFeature records the
// rules digest and serves the resources ("name=count,...", diffServedCounts).
func explainWaitAnnotations(t *testing.T, c *cluster, node, digest, resources string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		nf, err := c.api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace).Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		d, r := nf.Annotations[explainDigestAnnotation], nf.Annotations[explainResourcesAnnotation]
		return d == digest && diffServedCounts(t, r) == resources, fmt.Sprintf("annotations %s=%q %s=%q", explainDigestAnnotation, d, explainResourcesAnnotation, r)
	}); err != nil {
		t.Fatalf("NodeFeature of %s: want digest %s and resources %q: %v", node, digest, resources, err)
	}
}

// explainWaitEvent waits for a Normal ResourcesChanged Event on the Node
// with the message.
func explainWaitEvent(t *testing.T, c *cluster, node, message string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	sel := fields.Set{
		"involvedObject.kind": "Node",
		"involvedObject.name": node,
		"reason":              explainEventReason,
		"type":                corev1.EventTypeNormal,
	}.AsSelector().String()
	if err := waitFor(ctx, func() (bool, string) {
		evs, err := c.api.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Source.Component == "featureplug" && e.Message == message {
				return true, ""
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Sprintf("Events %s: %q", sel, seen)
	}); err != nil {
		t.Fatalf("node %s: no Event %q: %v", node, message, err)
	}
}
