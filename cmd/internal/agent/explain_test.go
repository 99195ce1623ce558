package agent

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// TestResourcesChangedEvent: the agent records a Normal ResourcesChanged
// Event on its Node for its first plan and again when a rules change
// changes its resources, and annotates its published content with the
// digest of the rules that made the served plan and its resources.
func TestResourcesChangedEvent(t *testing.T) {
	src, err := gpusource.OpenFake("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	first := []byte("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n")
	second := []byte("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: h100\n  devices: gpu\n  resource: example.com/h100\n")
	if err := os.WriteFile(rulesPath, first, 0o644); err != nil {
		t.Fatal(err)
	}
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-1"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := kube.CoreV1().Events(metav1.NamespaceDefault).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Rules: rulesPath, RulesEngine: testRulesEngine(), Kube: kubeclientset.New(kube, nil),
		Plugin:             deviceplugin.Options{KubeletDir: t.TempDir()},
		MPS:                mps.Options{ControlBinary: "/nonexistent/nvidia-cuda-mps-control"},
		RediscoverInterval: time.Hour,
		FileSettle:         time.Millisecond,
		FileCheckInterval:  50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, a)

	waitEvent := func(message string) {
		t.Helper()
		timeout := time.After(testWait)
		var seen []string
		for {
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Added {
					continue
				}
				e := ev.Object.(*corev1.Event)
				seen = append(seen, e.Reason+": "+e.Message)
				if e.Reason == ReasonResourcesChanged && e.Message == message {
					if e.Type != corev1.EventTypeNormal || e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "n" {
						t.Errorf("Event %+v: want a Normal Event about Node n", e)
					}
					return
				}
			case <-timeout:
				t.Fatalf("no %s Event %q; saw %q", ReasonResourcesChanged, message, seen)
			}
		}
	}
	waitEvent("nvidia.com/gpu: 0 -> 8 devices, rule gpu")
	checkAnnotations := func(digest, resources string) {
		t.Helper()
		c := sinkOf[*labeler.Sink](t, a).Published()
		if c == nil {
			t.Fatal("nothing published")
		}
		want := map[string]string{labeler.AnnotationRulesDigest: digest, labeler.AnnotationResources: resources,
			labeler.AnnotationMPSControl: "/nonexistent/nvidia-cuda-mps-control not found"}
		if !reflect.DeepEqual(c.Annotations, want) {
			t.Errorf("annotations %v, want %v", c.Annotations, want)
		}
	}
	served := func(resource string) string {
		devices := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
		return labeler.Served{DefaultServe: plan.ServeDevicePlugin, Resources: []labeler.ServedResource{
			{Name: resource, Count: 8, Serve: plan.ServeDevicePlugin, Devices: devices},
		}}.String()
	}
	checkAnnotations(plan.RulesDigest(first), served("nvidia.com/gpu"))

	if err := os.WriteFile(rulesPath, second, 0o644); err != nil {
		t.Fatal(err)
	}
	waitEvent("example.com/h100: 0 -> 8 devices, rule h100; nvidia.com/gpu: 8 -> 0 devices, rule gpu")
	checkAnnotations(plan.RulesDigest(second), served("example.com/h100"))
}
