package kube

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

// kubeRequest is one request the fake API server saw.
type kubeRequest struct {
	method, path, query, contentType, body string
}

// kubeFakeServer answers every request with reply(r) and records it.
func kubeFakeServer(t *testing.T, reply func(w http.ResponseWriter, r *http.Request)) (*Client, func() []kubeRequest) {
	t.Helper()
	var mu sync.Mutex
	var seen []kubeRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, kubeRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), string(body)})
		mu.Unlock()
		reply(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c, func() []kubeRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]kubeRequest(nil), seen...)
	}
}

func kubeWriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// TestClientRequests: each call is the request client-go's generated
// clients make (method, path, query, content type), and the answer is
// decoded into the right type.
func TestClientRequests(t *testing.T) {
	c, seen := kubeFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/nodes/n1"):
			kubeWriteJSON(w, corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", Labels: map[string]string{"pool": "a"}}})
		case strings.HasSuffix(r.URL.Path, "/nodes"):
			kubeWriteJSON(w, corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
				Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}})
		case strings.Contains(r.URL.Path, "/nodefeatures"):
			kubeWriteJSON(w, nfdv1alpha1.NodeFeature{TypeMeta: metav1.TypeMeta{Kind: "NodeFeature", APIVersion: "nfd.k8s-sigs.io/v1alpha1"},
				ObjectMeta: metav1.ObjectMeta{Name: "featureplug-n1", Namespace: "ns", ResourceVersion: "7"}})
		case strings.Contains(r.URL.Path, "/events"):
			kubeWriteJSON(w, corev1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "default"}})
		case strings.Contains(r.URL.Path, "/configmaps/"):
			kubeWriteJSON(w, corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: "rules"}, Data: map[string]string{"rules.yaml": "x"}})
		case strings.HasSuffix(r.URL.Path, "/deviceclasses"):
			kubeWriteJSON(w, resourcev1.DeviceClassList{TypeMeta: metav1.TypeMeta{Kind: "DeviceClassList", APIVersion: "resource.k8s.io/v1"},
				Items: []resourcev1.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"}}}})
		case strings.Contains(r.URL.Path, "/pods/"):
			kubeWriteJSON(w, corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: "featureplug-abcde", Namespace: "featureplug", UID: "pod-uid"}})
		default:
			http.NotFound(w, r)
		}
	})
	ctx := context.Background()
	node, err := c.Nodes().Get(ctx, "n1", metav1.GetOptions{ResourceVersion: "0"})
	if err != nil || node.UID != "u1" || node.Labels["pool"] != "a" {
		t.Fatalf("Nodes().Get = %+v, %v", node, err)
	}
	list, err := c.Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=n1"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("Nodes().List = %+v, %v", list, err)
	}
	nf, err := c.NodeFeatures("ns").Patch(ctx, "featureplug-n1", types.ApplyPatchType, []byte(`{"kind":"NodeFeature"}`),
		metav1.PatchOptions{FieldManager: "featureplug", Force: new(true)})
	if err != nil || nf.ResourceVersion != "7" {
		t.Fatalf("NodeFeatures().Patch = %+v, %v", nf, err)
	}
	if _, err := c.NodeFeatures("").List(ctx, metav1.ListOptions{LabelSelector: "a=b"}); err != nil {
		t.Fatal(err)
	}
	ev, err := c.Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "default"}, Reason: "R"}, metav1.CreateOptions{})
	if err != nil || ev.Name != "e1" {
		t.Fatalf("Events().Create = %+v, %v", ev, err)
	}
	if _, err := c.Events("default").Patch(ctx, "e1", types.MergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := c.ConfigMaps("featureplug").Get(ctx, "rules", metav1.GetOptions{})
	if err != nil || cm.Data["rules.yaml"] != "x" {
		t.Fatalf("ConfigMaps().Get = %+v, %v", cm, err)
	}
	pod, err := c.Pods("featureplug").Get(ctx, "featureplug-abcde", metav1.GetOptions{})
	if err != nil || pod.UID != "pod-uid" {
		t.Fatalf("Pods().Get = %+v, %v", pod, err)
	}
	classes, err := c.DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil || len(classes.Items) != 1 || classes.Items[0].Name != "gpu.example.com" {
		t.Fatalf("DeviceClasses().List = %+v, %v", classes, err)
	}

	want := []kubeRequest{
		{method: "GET", path: "/api/v1/nodes/n1", query: "resourceVersion=0"},
		{method: "GET", path: "/api/v1/nodes", query: "fieldSelector=metadata.name%3Dn1"},
		{method: "PATCH", path: "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/ns/nodefeatures/featureplug-n1",
			query: "fieldManager=featureplug&force=true", contentType: string(types.ApplyPatchType)},
		{method: "GET", path: "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeatures", query: "labelSelector=a%3Db"},
		{method: "POST", path: "/api/v1/namespaces/default/events", contentType: "application/json"},
		{method: "PATCH", path: "/api/v1/namespaces/default/events/e1", contentType: string(types.MergePatchType)},
		{method: "GET", path: "/api/v1/namespaces/featureplug/configmaps/rules"},
		{method: "GET", path: "/api/v1/namespaces/featureplug/pods/featureplug-abcde"},
		{method: "GET", path: "/apis/resource.k8s.io/v1/deviceclasses"},
	}
	got := seen()
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.method != w.method || g.path != w.path || g.query != w.query || (w.contentType != "" && g.contentType != w.contentType) {
			t.Errorf("request %d = %s %s?%s (%s), want %s %s?%s (%s)", i, g.method, g.path, g.query, g.contentType,
				w.method, w.path, w.query, w.contentType)
		}
	}
	if !strings.Contains(got[4].body, `"reason":"R"`) {
		t.Errorf("Event body = %s", got[4].body)
	}
}

// TestClientNotFound: a 404 with a Status is NotFound; a 404 without one
// (the API server before NFD's CRDs are installed) is NotFound with an
// UnexpectedServerResponse cause, which the publisher reads as "CRD
// missing", as with client-go's generated clients.
func TestClientNotFound(t *testing.T) {
	c, _ := kubeFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/nodefeatures/") {
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(apierrors.NewNotFound(corev1.Resource("nodes"), "n1").ErrStatus)
	})
	ctx := context.Background()
	if _, err := c.Nodes().Get(ctx, "n1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a missing Node: %v, want NotFound", err)
	}
	_, err := c.NodeFeatures("ns").Get(ctx, "x", metav1.GetOptions{})
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) || status.Status().Details == nil ||
		len(status.Status().Details.Causes) == 0 || status.Status().Details.Causes[0].Type != metav1.CauseTypeUnexpectedServerResponse {
		t.Errorf("Get without the CRD: %#v, want NotFound with an UnexpectedServerResponse cause", err)
	}
}

// TestClientWatch: a Node watch streams decoded events.
func TestClientWatch(t *testing.T) {
	c, seen := kubeFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		_ = enc.Encode(metav1.WatchEvent{Type: string(watch.Added), Object: kubeRaw(t, corev1.Node{
			TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}})})
	})
	w, err := c.Nodes().Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=n1", ResourceVersion: "5"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev, ok := <-w.ResultChan()
	if !ok || ev.Type != watch.Added {
		t.Fatalf("watch event = %+v, %v", ev, ok)
	}
	if n, ok := ev.Object.(*corev1.Node); !ok || n.UID != "u1" {
		t.Errorf("watch object = %#v, want Node n1", ev.Object)
	}
	if q := seen()[0].query; !strings.Contains(q, "watch=true") || !strings.Contains(q, "resourceVersion=5") {
		t.Errorf("watch query = %s", q)
	}
}

func kubeRaw(t *testing.T, v any) runtime.RawExtension {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: data}
}
