package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/test/harness"
)

// scaleSizeBudget is the most bytes the NodeFeature of each bundled fake
// machine may take as stored (the object's JSON as the API server keeps it
// in etcd, managed fields included), published with the built-in "mixed"
// rules. The budgets are the sizes measured when they were recorded
// (2026-12-01, in the comments; the resources annotation as JSON with each
// resource's devices, sharing and API) plus about 3 %; a change that makes a
// NodeFeature larger has to raise the budget here, on purpose
// (docs/scale.md says what the bytes are). Before the publisher cleared
// the managed fields, the dgx-a100's was 18,538 bytes.
var scaleSizeBudget = map[string]int{
	"a100-80gb-mixed": 7900,  // 7,685
	"dgx-a100":        16050, // 15,597
	"dgx-h100":        5700,  // 5,528
	"h100-nvl":        3900,  // 3,778
	"h200-mig":        9050,  // 8,789
	"hgx-b200":        5700,  // 5,507
	"l40s-pcie":       3900,  // 3,792
	"workstation":     2570,  // 2,492
}

// scaleSizeDumpEnv names a directory TestNodeFeatureSize writes the stored
// NodeFeatures to (<n>.json, as the API server returned them), to look at.
const scaleSizeDumpEnv = "SCALE_SIZE_DUMP"

// TestNodeFeatureSize publishes the NodeFeature of every bundled fake
// machine through the real agent against a real API server and checks its
// size as stored against scaleSizeBudget. It logs what each object is made
// of: metadata, managed fields, labels, and each feature.
func TestNodeFeatureSize(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and the agents")
	}
	bin := scaleBuildDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := len(scaleSizeBudget)
	r := &scaleRun{t: t, ctx: ctx, n: n}
	r.api = harness.StartAPIServer(t)
	if err := r.api.CreateNamespace(ctx, scaleNamespace); err != nil {
		t.Fatal(err)
	}
	r.createNodes()
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r.driver = harness.StartProcess(t, harness.ProcessSpec{
		Name: "featureplug-scale",
		Path: bin,
		Args: []string{
			"--kubeconfig", r.api.KubeconfigPath,
			"--nodes", strconv.Itoa(n),
			"--prefix", scalePrefix,
			"--namespace", scaleNamespace,
			"--rules", "mixed",
			"--fake-nodes", strings.Join(slices.Sorted(maps.Keys(scaleSizeBudget)), ","),
			"--status-addr", "127.0.0.1:" + strconv.Itoa(port),
			"--log-file", filepath.Join(t.TempDir(), "agents.log"),
		},
	})
	r.status = fmt.Sprintf("http://127.0.0.1:%d/status", port)
	r.waitAgents("every agent published", func(a scaleAgent) bool {
		return a.Publishes["ok"] >= 1 && len(a.Resources) > 0
	})
	fakes := map[string]string{}
	for _, a := range r.agents() {
		fakes[a.Node] = a.Fake
	}
	items := r.storedNodeFeatures()
	if dir := os.Getenv(scaleSizeDumpEnv); dir != "" {
		for i, item := range items {
			if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)+".json"), item, 0o644); err != nil {
				t.Errorf("$%s: %v", scaleSizeDumpEnv, err)
			}
		}
	}
	sizes := scaleSizes(t, items, fakes)
	for _, fake := range slices.Sorted(maps.Keys(scaleSizeBudget)) {
		t.Run(fake, func(t *testing.T) {
			s, ok := sizes[fake]
			if !ok {
				t.Fatalf("no NodeFeature for %s", fake)
			}
			t.Logf("%s", s)
			if s.managedFields > 0 {
				t.Errorf("the NodeFeature has %d bytes of managed fields, want none", s.managedFields)
			}
			if budget := scaleSizeBudget[fake]; s.total > budget {
				t.Errorf("%d bytes as stored, budget %d (%s)", s.total, budget, s)
			}
		})
	}
}

// scaleSize is what one stored NodeFeature is made of, in bytes of its
// compact JSON.
type scaleSize struct {
	total, managedFields, annotations, metadata, labels int
	// features are the bytes of each feature, "flags/nvidia.capabilities".
	features map[string]int
	// attributes are the bytes each attribute takes over all instances
	// of an instance feature, "nvidia.mig/parent.uuid" (key, value,
	// quotes, colon and comma).
	attributes map[string]int
}

func (s scaleSize) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "total %d: metadata %d (managedFields %d, annotations %d), spec.labels %d", s.total, s.metadata, s.managedFields, s.annotations, s.labels)
	for _, k := range slices.Sorted(maps.Keys(s.features)) {
		fmt.Fprintf(&b, ", %s %d", k, s.features[k])
	}
	keys := slices.Collect(maps.Keys(s.attributes))
	slices.SortFunc(keys, func(a, b string) int { return s.attributes[b] - s.attributes[a] })
	b.WriteString("; largest attributes over all instances:")
	for _, k := range keys[:min(8, len(keys))] {
		fmt.Fprintf(&b, " %s %d", k, s.attributes[k])
	}
	return b.String()
}

// storedNodeFeatures returns every NodeFeature of the agents' namespace
// as the API server returns it: the JSON it stores for a custom resource.
func (r *scaleRun) storedNodeFeatures() []json.RawMessage {
	raw, err := r.api.NFD.NfdV1alpha1().RESTClient().Get().Namespace(scaleNamespace).Resource("nodefeatures").DoRaw(r.ctx)
	if err != nil {
		r.t.Fatalf("listing NodeFeatures: %v", err)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		r.t.Fatalf("decoding NodeFeatures: %v", err)
	}
	return list.Items
}

// scaleSizes measures each stored NodeFeature, keyed by the fake machine
// of its node (fakes: node name -> fake machine).
func scaleSizes(t *testing.T, items []json.RawMessage, fakes map[string]string) map[string]scaleSize {
	t.Helper()
	out := map[string]scaleSize{}
	for _, item := range items {
		var obj struct {
			Metadata struct {
				Labels        map[string]string `json:"labels"`
				ManagedFields json.RawMessage   `json:"managedFields"`
				Annotations   json.RawMessage   `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Labels   json.RawMessage `json:"labels"`
				Features map[string]map[string]struct {
					Elements json.RawMessage `json:"elements"`
				} `json:"features"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(item, &obj); err != nil {
			t.Fatalf("decoding a NodeFeature: %v", err)
		}
		var whole map[string]json.RawMessage
		if err := json.Unmarshal(item, &whole); err != nil {
			t.Fatalf("decoding a NodeFeature: %v", err)
		}
		s := scaleSize{
			total:         len(item),
			metadata:      len(whole["metadata"]),
			managedFields: len(obj.Metadata.ManagedFields),
			annotations:   len(obj.Metadata.Annotations),
			labels:        len(obj.Spec.Labels),
			features:      map[string]int{},
			attributes:    map[string]int{},
		}
		for kind, set := range obj.Spec.Features {
			for name, f := range set {
				s.features[kind+"/"+name] = len(f.Elements)
				if kind != "instances" {
					continue
				}
				var elems []struct {
					Attributes map[string]string `json:"attributes"`
				}
				if err := json.Unmarshal(f.Elements, &elems); err != nil {
					t.Fatalf("decoding instances of %s: %v", name, err)
				}
				for _, e := range elems {
					for k, v := range e.Attributes {
						s.attributes[name+"/"+k] += len(k) + len(v) + 6
					}
				}
			}
		}
		node := obj.Metadata.Labels[nfdv1alpha1.NodeFeatureObjNodeNameLabel]
		fake, ok := fakes[node]
		if !ok {
			t.Fatalf("NodeFeature of node %q: no agent runs that node", node)
		}
		out[fake] = s
	}
	return out
}

// TestNodeFeatureStaysWithoutManagedFields drives labeler's
// NodeFeaturePublisher against a real API server: its create clears the
// managed fields the apply recorded, its merge patches record none, a
// label that goes is removed, and an edit made behind its back (a
// Conflict on its next patch) is undone by the patch after it re-reads.
func TestNodeFeatureStaysWithoutManagedFields(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api := harness.StartAPIServer(t)
	if err := api.CreateNamespace(ctx, scaleNamespace); err != nil {
		t.Fatal(err)
	}
	const node = "scale-size-node"
	if _, err := api.CreateNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	nodeFeatures := api.NFD.NfdV1alpha1().NodeFeatures(scaleNamespace)
	pub, err := labeler.NewNodeFeaturePublisher(labeler.NodeFeatureConfig{
		NodeName: node, Namespace: scaleNamespace,
		NFD: labeler.NFDClientOf(api.NFD.NfdV1alpha1().NodeFeatures),
		Node: func(ctx context.Context) (*corev1.Node, error) {
			return api.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	content := func(labels map[string]string) labeler.Content {
		return labeler.Content{Features: nfdv1alpha1.NewFeatures(), Labels: labels,
			Annotations: map[string]string{"featureplug.io/rules-digest": "test"}}
	}
	check := func(step string, want map[string]string) {
		t.Helper()
		obj, err := nodeFeatures.Get(ctx, pub.Name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(obj.ManagedFields) > 0 {
			t.Errorf("%s: managed fields %+v, want none", step, obj.ManagedFields)
		}
		if !maps.Equal(obj.Spec.Labels, want) {
			t.Errorf("%s: spec.labels %v, want %v", step, obj.Spec.Labels, want)
		}
	}
	a := map[string]string{"nvidia.com/a": "1", "nvidia.com/b": "2"}
	if err := pub.Publish(ctx, content(a)); err != nil {
		t.Fatal(err)
	}
	check("created", a)
	b := map[string]string{"nvidia.com/a": "3"}
	if err := pub.Publish(ctx, content(b)); err != nil {
		t.Fatal(err)
	}
	check("a label changed, one removed", b)
	// Someone else edits the object; the publisher's next patch names the
	// resourceVersion it last saw and meets a Conflict.
	obj, err := nodeFeatures.Get(ctx, pub.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Spec.Labels["example.com/edited"] = "yes"
	if _, err := nodeFeatures.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := map[string]string{"nvidia.com/a": "4"}
	if err := pub.Publish(ctx, content(c)); err != nil {
		t.Fatal(err)
	}
	check("after someone else's edit", c)
	if s := pub.Stats(); s != (labeler.WriteStats{Creates: 1, Updates: 3}) {
		t.Errorf("stats %+v, want 1 create and 3 updates (clearing the managed fields, two changes)", s)
	}
}
