package kube

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ownerPods is a PodGetter holding one Pod.
type ownerPods struct{ pod *corev1.Pod }

func (p ownerPods) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Pod, error) {
	if p.pod == nil || name != p.pod.Name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	return p.pod.DeepCopy(), nil
}

// TestOwnerResolver: --owner daemonset owns the NodeFeature by the agent's
// Pod and its DaemonSet (the Pod's controller reference), as nfd-worker
// does; pod by the Pod; node (or no POD_NAME) leaves it to the Node.
func TestOwnerResolver(t *testing.T) {
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "featureplug-x7k2p", Namespace: "featureplug", UID: "pod-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "featureplug", UID: "ds-uid", Controller: &yes}}}}
	podRef := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "featureplug-x7k2p", UID: "pod-uid"}
	dsRef := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "featureplug", UID: "ds-uid"}
	bare := pod.DeepCopy()
	bare.OwnerReferences = nil
	tests := []struct {
		name    string
		cfg     OwnerConfig
		want    []metav1.OwnerReference // nil: the Node owns it
		wantErr string
	}{
		{name: "default", cfg: OwnerConfig{PodName: pod.Name, PodUID: "pod-uid", Pods: ownerPods{pod}}, want: []metav1.OwnerReference{podRef, dsRef}},
		{name: "daemonset", cfg: OwnerConfig{Mode: OwnerDaemonSet, PodName: pod.Name, Pods: ownerPods{pod}}, want: []metav1.OwnerReference{podRef, dsRef}},
		{name: "pod", cfg: OwnerConfig{Mode: OwnerPod, PodName: pod.Name, Pods: ownerPods{pod}}, want: []metav1.OwnerReference{podRef}},
		{name: "pod without a DaemonSet", cfg: OwnerConfig{PodName: pod.Name, Pods: ownerPods{bare}}, want: []metav1.OwnerReference{podRef}},
		{name: "node", cfg: OwnerConfig{Mode: OwnerNode, PodName: pod.Name, Pods: ownerPods{pod}}},
		{name: "outside a pod", cfg: OwnerConfig{Pods: ownerPods{pod}}},
		// An owner in another namespace would get the object collected.
		{name: "pod in another namespace", cfg: OwnerConfig{PodName: pod.Name, PodNamespace: "elsewhere", Pods: ownerPods{pod}}},
		{name: "pod in the namespace", cfg: OwnerConfig{PodName: pod.Name, PodNamespace: "featureplug", Pods: ownerPods{pod}}, want: []metav1.OwnerReference{podRef, dsRef}},
		{name: "another pod's UID", cfg: OwnerConfig{PodName: pod.Name, PodUID: "other", Pods: ownerPods{pod}}, wantErr: "not POD_UID other"},
		{name: "pod not found", cfg: OwnerConfig{PodName: "gone", Pods: ownerPods{pod}}, wantErr: "get Pod featureplug/gone"},
		{name: "bad mode", cfg: OwnerConfig{Mode: "replicaset"}, wantErr: `"replicaset" is not an owner`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := OwnerResolver("featureplug", tt.cfg, slog.New(slog.DiscardHandler))
			var got []metav1.OwnerReference
			if err == nil && fn != nil {
				got, err = fn(context.Background())
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("owners %+v, want %+v", got, tt.want)
			}
		})
	}
}
