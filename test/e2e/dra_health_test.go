package e2e

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubefeatures "k8s.io/kubernetes/pkg/features"

	"github.com/featureplug/featureplug/test/harness"
)

// draE2EWaitDeviceHealth waits until the kubelet's DRA manager puts, in
// the status of pod's container "main", exactly one device for its claim
// "gpu": the one of CDI ID cdiID, with health want and, where the
// kubelet's ResourceHealthStatusMessage gate is on, the message msg (""
// for none).
func draE2EWaitDeviceHealth(t *testing.T, k *harness.KubeletDRA, pod *corev1.Pod, cdiID string, want corev1.ResourceHealthStatus, msg string) {
	t.Helper()
	withMessage := utilfeature.DefaultFeatureGate.Enabled(kubefeatures.ResourceHealthStatusMessage)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		cs := k.AllocatedResourcesStatus(pod)
		if len(cs) != 1 || cs[0].Name != "main" {
			return false, fmt.Sprintf("container statuses %+v", cs)
		}
		rs := cs[0].AllocatedResourcesStatus
		if len(rs) != 1 || rs[0].Name != "claim:gpu" || len(rs[0].Resources) != 1 {
			return false, fmt.Sprintf("allocated resources status %+v", rs)
		}
		h := rs[0].Resources[0]
		got := ""
		if h.Message != nil {
			got = *h.Message
		}
		state := fmt.Sprintf("device %s health %s message %q", h.ResourceID, h.Health, got)
		if string(h.ResourceID) != cdiID || h.Health != want {
			return false, state
		}
		if withMessage && got != msg {
			return false, state
		}
		return true, ""
	}); err != nil {
		t.Fatalf("pod %s: waiting until the kubelet reports device %s %s (message %q, gate %s %v): %v",
			pod.Name, cdiID, want, msg, kubefeatures.ResourceHealthStatusMessage, withMessage, err)
	}
}
