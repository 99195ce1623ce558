package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
)

// kubeRecords is a slog handler that hands every record's message and
// attributes, as text, to a channel.
type kubeRecords chan string

func (c kubeRecords) Enabled(context.Context, slog.Level) bool { return true }
func (c kubeRecords) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	select {
	case c <- b.String():
	default: // a full channel drops: tests wait for lines they expect soon
	}
	return nil
}
func (c kubeRecords) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c kubeRecords) WithGroup(string) slog.Handler      { return c }

// kubeWaitRecord waits for a record containing every part.
func kubeWaitRecord(t *testing.T, records kubeRecords, parts ...string) {
	t.Helper()
	timeout := time.After(testWait)
	var seen []string
	for {
		select {
		case r := <-records:
			seen = append(seen, r)
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(r, p)
			}
			if ok {
				return
			}
		case <-timeout:
			t.Fatalf("no log record with %q; saw:\n%s", parts, strings.Join(seen, "\n"))
		}
	}
}

// kubeNodeGets counts GETs of Nodes.
func kubeNodeGets(kube *kubefake.Clientset) int {
	n := 0
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "nodes" && a.GetVerb() == "get" {
			n++
		}
	}
	return n
}

// TestNodeWatchReplans: the agent reads its Node's labels from a watch, not
// by GET: a label added to the Node replans at once (the rule with a node
// selector takes the GPUs), and no Node is ever read by GET.
func TestNodeWatchReplans(t *testing.T) {
	src, err := gpusource.OpenFake("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: pool
  devices: gpu
  nodeSelector:
    matchLabels: {pool: inference}
  resource: example.com/inference
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu
`), 0o644); err != nil {
		t.Fatal(err)
	}
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-1"}})
	records := make(kubeRecords, 1000)
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Rules: rulesPath, RulesEngine: testRulesEngine(), Kube: kubeclientset.New(kube, nil),
		Plugin: deviceplugin.Options{KubeletDir: t.TempDir()},
		// Rediscovery never comes: only the watch can bring the label.
		RediscoverInterval: time.Hour,
		Logger:             slog.New(records),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := runAgent(t, a)
	kubeWaitRecord(t, records, "plan applied", "trigger=start", "nvidia.com/gpu:8")

	node, err := kube.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gets := kubeNodeGets(kube) // the test's own GET
	node.Labels = map[string]string{"pool": "inference"}
	if _, err := kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeWaitRecord(t, records, "plan applied", "trigger=node labels", "example.com/inference:8")
	if got := kubeNodeGets(kube); got != gets {
		t.Errorf("the agent read its Node by GET %d times, want 0 (watch only)", got-gets+1)
	}
	for _, act := range kube.Actions() {
		if act.GetResource().Resource == "nodes" && act.GetVerb() == "list" {
			if sel := act.(k8stesting.ListAction).GetListRestrictions().Fields.String(); sel != "metadata.name=n" {
				t.Errorf("Node list with field selector %q, want metadata.name=n", sel)
			}
		}
	}
}
