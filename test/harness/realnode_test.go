package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// TestRealNodeRunsProbe runs one probe pod on a RealNode, with an
// environment variable and a hostPath volume, and reads its report: the
// container saw the variable, the directory the host has (same device
// and inode), the device nodes every container gets, and could write
// into the volume.
func TestRealNodeRunsProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, containerd and the kubelet")
	}
	if why := harness.RealNodeUnavailable(); why != "" {
		t.Skip(why)
	}
	api := harness.StartAPIServer(t)
	node := harness.StartRealNode(t, api, "real-node")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	host := t.TempDir()
	pod := node.ProbePod("probe", "-touch", "/data/touched")
	c := &pod.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "PROBE_VAR", Value: "42"}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}}}
	created := time.Now()
	if _, err := api.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, _, err := node.WaitProbe(ctx, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe started %s after the pod was created", r.Started.Sub(created).Round(time.Millisecond))
	if got := r.Env["PROBE_VAR"]; got != "42" {
		t.Errorf("PROBE_VAR = %q in the container, want 42", got)
	}
	if d, ok := r.Devices["/dev/null"]; !ok || d.Type != "c" || d.Major != 1 || d.Minor != 3 {
		t.Errorf("/dev/null in the container: %+v (present %v), want c 1:3", d, ok)
	}
	m, ok := r.Mount("/data")
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil {
		t.Fatal(err)
	}
	if !ok || m.Dev != st.Dev || m.Ino != st.Ino {
		t.Errorf("/data in the container is %+v (mounted %v), want the host's %s (dev %d ino %d)", m, ok, host, st.Dev, st.Ino)
	}
	if e := r.Touched["/data/touched"]; e != "" {
		t.Errorf("creating /data/touched in the container: %s", e)
	}
	if _, err := os.Stat(filepath.Join(host, "touched")); err != nil {
		t.Errorf("the file the container created is not on the host: %v", err)
	}
}
