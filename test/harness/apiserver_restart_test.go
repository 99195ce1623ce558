package harness_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	nfdclient "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned"

	"github.com/featureplug/featureplug/test/harness"
)

// TestAPIServerRestart kills kube-apiserver and starts it again, then stops
// it with SIGTERM and starts it again. While it is down its clients are
// refused; once it is back on the same address, clients made before, from
// Config and from the kubeconfig file, work again, and what was stored before
// (objects, the NFD CRDs) is still there.
func TestAPIServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Clients made before the restart, as a process started earlier would
	// hold them.
	kcfg, err := clientcmd.BuildConfigFromFlags("", api.KubeconfigPath)
	if err != nil {
		t.Fatalf("loading %s: %v", api.KubeconfigPath, err)
	}
	fromFile, err := kubernetes.NewForConfig(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	nfdFromFile, err := nfdclient.NewForConfig(kcfg)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before-restart", Namespace: metav1.NamespaceDefault},
		Data:       map[string]string{"k": "v"},
	}
	created, err := api.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a ConfigMap: %v", err)
	}

	// A crash (SIGKILL), then a stop (SIGTERM) with a grace period.
	for _, grace := range []time.Duration{0, 10 * time.Second} {
		if err := api.StopAPIServer(grace); err != nil {
			t.Fatal(err)
		}
		if _, err := fromFile.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{}); err == nil {
			t.Fatalf("kube-apiserver still answers after StopAPIServer(%s)", grace)
		} else {
			t.Logf("while stopped: %v", err)
		}
		if err := api.StopAPIServer(grace); err == nil {
			t.Error("a second StopAPIServer did not fail")
		}

		start := time.Now()
		if err := api.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("kube-apiserver ready again at %s after %s", api.Config.Host, time.Since(start).Round(time.Millisecond))
		if err := api.StartAPIServer(ctx); err == nil {
			t.Error("StartAPIServer on a running kube-apiserver did not fail")
		}
	}

	for name, c := range map[string]kubernetes.Interface{"Client": api.Client, "kubeconfig": fromFile} {
		got, err := c.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s after the restart: %v", name, err)
			continue
		}
		if got.UID != created.UID || got.Data["k"] != "v" {
			t.Errorf("%s after the restart: ConfigMap %s is uid %s data %v, want uid %s data %v", name, cm.Name, got.UID, got.Data, created.UID, cm.Data)
		}
	}
	// The CRDs came back from etcd: their API is served again.
	if _, err := nfdFromFile.NfdV1alpha1().NodeFeatures(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing NodeFeatures after the restart: %v", err)
	}
	if _, err := api.NFD.NfdV1alpha1().NodeFeatureRules().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing NodeFeatureRules after the restart: %v", err)
	}
}
