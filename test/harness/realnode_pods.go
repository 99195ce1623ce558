package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/featureplug/featureplug/test/harness/podprobe"
)

// ProbeContainer is the name of the one container of ProbePod's pods.
const ProbeContainer = "probe"

// probeFailureReasons are container waiting reasons that will not clear
// by themselves.
var probeFailureReasons = map[string]bool{
	"CreateContainerError": true, "CreateContainerConfigError": true, "RunContainerError": true,
	"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true,
	"CrashLoopBackOff": true, "InvalidImageName": true,
}

// ProbePod returns a pod in the default namespace, bound to the node,
// whose one container (ProbeContainer) runs ProbeImage with args (see
// internal/podimage/probe: -wait keeps it running, -touch PATH creates a
// file): host network, no restart, no service-account token, every taint
// tolerated (the Node is NotReady without CNI). Callers add resources or
// claims; clearing Spec.NodeName leaves the pod to the scheduler.
func (n *RealNode) ProbePod(name string, args ...string) *corev1.Pod {
	noToken := false
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                      n.Name,
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &noToken,
			TerminationGracePeriodSeconds: &grace,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            ProbeContainer,
				Image:           ProbeImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
			}},
		},
	}
}

// WaitProbe waits until the probe container of the pod (ProbePod's) has
// printed its report and returns it with the pod as it was then. It fails
// early, with the kubelet's reason and the pod's events, when the pod
// failed or its container cannot be created or started.
func (n *RealNode) WaitProbe(ctx context.Context, name string) (*podprobe.Report, *corev1.Pod, error) {
	pods := n.api.Client.CoreV1().Pods(metav1.NamespaceDefault)
	var (
		report *podprobe.Report
		pod    *corev1.Pod
	)
	err := poll(ctx, func() (bool, string, error) {
		var err error
		pod, err = pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		state, failed := probeState(pod)
		if failed {
			return false, "", fmt.Errorf("pod %s: %s; events: %s", name, state, n.podEvents(ctx, pod))
		}
		if pod.Spec.NodeName == "" {
			return false, state, nil
		}
		report, err = n.readProbe(pod)
		if err != nil {
			return false, state + "; " + err.Error(), nil
		}
		return report != nil, state, nil
	})
	if err != nil && pod != nil && !strings.Contains(err.Error(), "events:") {
		err = fmt.Errorf("%w; events: %s", err, n.podEvents(ctx, pod))
	}
	return report, pod, err
}

// probeState describes the pod's probe container and says whether it
// failed for good.
func probeState(pod *corev1.Pod) (string, bool) {
	if pod.Status.Phase == corev1.PodFailed {
		return fmt.Sprintf("phase Failed: %s %s", pod.Status.Reason, pod.Status.Message), true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ProbeContainer {
			continue
		}
		switch {
		case cs.State.Waiting != nil:
			w := cs.State.Waiting
			return fmt.Sprintf("container waiting: %s: %s", w.Reason, w.Message), probeFailureReasons[w.Reason]
		case cs.State.Terminated != nil:
			tm := cs.State.Terminated
			return fmt.Sprintf("container terminated: exit %d %s: %s", tm.ExitCode, tm.Reason, tm.Message), tm.ExitCode != 0
		case cs.State.Running != nil:
			return "container running", false
		}
	}
	return fmt.Sprintf("phase %s, node %q, no container status yet", pod.Status.Phase, pod.Spec.NodeName), false
}

// podEvents lists the pod's events, oldest first, in one line.
func (n *RealNode) podEvents(ctx context.Context, pod *corev1.Pod) string {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	list, err := n.api.Client.CoreV1().Events(pod.Namespace).List(ectx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod.Name).String(),
	})
	if err != nil {
		return err.Error()
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].LastTimestamp.Before(&list.Items[j].LastTimestamp) })
	var out []string
	for _, e := range list.Items {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " | ")
}

// ContainerLogPath is where the kubelet has the probe container's log of
// the pod's first run: <pod logs>/<namespace>_<name>_<uid>/<container>/0.log.
func (n *RealNode) ContainerLogPath(pod *corev1.Pod) string {
	return filepath.Join(n.PodLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), ProbeContainer, "0.log")
}

// readProbe returns the probe's report from the container's log, nil
// while it has not printed it.
func (n *RealNode) readProbe(pod *corev1.Pod) (*podprobe.Report, error) {
	b, err := os.ReadFile(n.ContainerLogPath(pod))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lines, err := parseCRILog(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.ContainerLogPath(pod), err)
	}
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, podprobe.Marker); ok {
			var r podprobe.Report
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return nil, fmt.Errorf("%s: the probe's report: %w", n.ContainerLogPath(pod), err)
			}
			return &r, nil
		}
	}
	return nil, nil
}

// parseCRILog returns the complete lines of a container log in the CRI
// format ("<time> <stream> <P|F> <content>", a long line split into
// partial P records ended by an F record).
func parseCRILog(b []byte) ([]string, error) {
	var out []string
	var partial strings.Builder
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for s.Scan() {
		f := strings.SplitN(s.Text(), " ", 4)
		if len(f) < 3 {
			return out, fmt.Errorf("malformed CRI log line %q", s.Text())
		}
		content := ""
		if len(f) == 4 {
			content = f[3]
		}
		partial.WriteString(content)
		if f[2] == "F" {
			out = append(out, partial.String())
			partial.Reset()
		}
	}
	return out, s.Err()
}
