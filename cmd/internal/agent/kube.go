package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// apiTimeout bounds one API call made from the agent's loop, so that an
// unreachable API server never stalls planning or serving.
const apiTimeout = 5 * time.Second

func getNode(ctx context.Context, kube kubernetes.Interface, name string) (*corev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	return node, nil
}

// eventRecorder reports problems as Kubernetes Events on the agent's Node,
// where `kubectl describe node` shows them.
type eventRecorder struct {
	kube      kubernetes.Interface
	node      string
	namespace string
	log       *slog.Logger
}

// newEventRecorder records Events about the Node in the default namespace:
// the API server accepts an Event about a cluster-scoped object only there
// (or in kube-system), where the kubelet writes its own node Events; in any
// other namespace it is rejected with "involvedObject.namespace: does not
// match event.namespace".
func newEventRecorder(kube kubernetes.Interface, node string, log *slog.Logger) *eventRecorder {
	return &eventRecorder{kube: kube, node: node, namespace: metav1.NamespaceDefault, log: log}
}

// warn records a Warning event; failures are logged, never returned.
func (r *eventRecorder) warn(ctx context.Context, reason, message string) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var uid string
	if node, err := getNode(ctx, r.kube, r.node); err == nil {
		uid = string(node.UID)
	}
	const maxMessage = 1024
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: r.node + ".featureplug.", Namespace: r.namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Node", APIVersion: "v1", Name: r.node, UID: types.UID(uid),
		},
		Reason:              reason,
		Message:             message,
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: "featureplug", Host: r.node},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "featureplug.io/agent",
		ReportingInstance:   "featureplug-" + r.node,
	}
	if _, err := r.kube.CoreV1().Events(r.namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		r.log.Warn("recording an event failed", "reason", reason, "err", err)
	}
}
