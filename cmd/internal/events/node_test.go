package events_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/featureplug/featureplug/cmd/internal/events"
	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
)

// TestEventsAboutTheNode: Events go through the recorder to the
// default namespace, about the Node with its UID from the watch (no Node
// GET); a repeated Event is one object with a count, a different message
// another object.
func TestEventsAboutTheNode(t *testing.T) {
	cs := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-1"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := cs.CoreV1().Events(metav1.NamespaceDefault).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	nodes := kube.NewNodeWatch(kubeclientset.New(cs, nil), "n")
	nodes.Start(ctx)
	if !nodes.Wait(ctx, 20*time.Second) {
		t.Fatal("node watch did not sync")
	}
	rec := events.New("n", nodes.UID, nil)
	rec.Start(ctx, kubeclientset.New(cs, nil))

	rec.Warn("RulesFileMissing", "rules file lost (does not exist)")
	rec.Warn("RulesFileMissing", "rules file lost (does not exist)")
	rec.Warn("RulesFileMissing", "rules file lost (is a directory)")

	counts := map[string]int32{} // message -> count
	timeout := time.After(20 * time.Second)
	for counts["rules file lost (does not exist)"] != 2 || counts["rules file lost (is a directory)"] != 1 {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			e := ev.Object.(*corev1.Event)
			if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "n" || e.InvolvedObject.UID != "uid-1" ||
				e.Type != corev1.EventTypeWarning || e.Source.Component != "featureplug" {
				t.Errorf("Event %+v: want a Warning from featureplug about Node n uid-1", e)
			}
			counts[e.Message] = e.Count
		case <-timeout:
			t.Fatalf("Events seen (message: count): %v; want the first with count 2, the second once", counts)
		}
	}
	list, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Errorf("%d Event objects, want 2 (the repeat is a count)", len(list.Items))
	}
	if got := nodeGets(cs); got != 0 {
		t.Errorf("%d Node GETs for Events, want 0", got)
	}
}

// nodeGets counts GETs of Nodes.
func nodeGets(cs *kubefake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "nodes" && a.GetVerb() == "get" {
			n++
		}
	}
	return n
}
