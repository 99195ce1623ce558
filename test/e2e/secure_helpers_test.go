package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/featureplug/featureplug/test/harness"
)

// secureApply applies objs to the API server with server-side apply as the
// admin, Namespaces first, as `kubectl apply --server-side` of a rendering
// would.
func secureApply(ctx context.Context, t *testing.T, api *harness.APIServer, label string, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	ordered := slices.Clone(objs)
	slices.SortStableFunc(ordered, func(a, b *unstructured.Unstructured) int {
		an, bn := a.GetKind() == "Namespace", b.GetKind() == "Namespace"
		switch {
		case an && !bn:
			return -1
		case bn && !an:
			return 1
		}
		return 0
	})
	for _, o := range ordered {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", label, gvk, o.GetName(), err)
		}
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "featureplug-e2e"}); err != nil {
			t.Fatalf("%s: server-side apply of %s %s/%s: %v", label, gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	t.Logf("applied %d objects of %s with server-side apply", len(objs), label)
}

// secureOnly returns the one object of kind in objs, or fails the test.
func secureOnly(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s in the rendering, want 1", len(found), kind)
	}
	return found[0]
}

// secureAgentIdentity is what the agent on one node runs as: the shipped
// service account, with a token bound to a pod on that node (as the
// kubelet mounts it), so the API server sees the node in the user's extra
// field authentication.kubernetes.io/node-name.
type secureAgentIdentity struct {
	// Config is a client configuration with only the token.
	Config *rest.Config
	// Kubeconfig is a kubeconfig file with the same credentials.
	Kubeconfig string
	// Env is the downward API's view of the pod the token is bound to
	// (POD_NAME, POD_UID, POD_NAMESPACE), as the manifests set it.
	Env []string
}

// secureAgentOn creates the Node node (unless it exists) and a pod of the
// service account ns/sa on it, and returns that pod's bound token.
func secureAgentOn(ctx context.Context, t *testing.T, api *harness.APIServer, ns, sa, node string) secureAgentIdentity {
	t.Helper()
	if _, err := api.CreateNode(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := api.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "featureplug-" + node, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: sa,
			Containers:         []corev1.Container{{Name: "agent", Image: "featureplug:e2e"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the agent pod on %s: %v", node, err)
	}
	tr, err := api.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of %s/%s bound to pod %s: %v", ns, sa, pod.Name, err)
	}
	cfg := rest.AnonymousClientConfig(api.Config)
	cfg.BearerToken = tr.Status.Token

	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["agent"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "agent"}
	kc.CurrentContext = "agent"
	path := filepath.Join(t.TempDir(), "kubeconfig-"+node)
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("writing the agent's kubeconfig: %v", err)
	}
	return secureAgentIdentity{Config: cfg, Kubeconfig: path,
		Env: []string{"POD_NAME=" + pod.Name, "POD_UID=" + string(pod.UID), "POD_NAMESPACE=" + ns}}
}

// secureRequestKey is one series of kube-apiserver's apiserver_request_total.
type secureRequestKey struct {
	Group, Resource, Subresource, Verb, Code string
}

func (k secureRequestKey) String() string {
	r := k.Resource
	if k.Subresource != "" {
		r += "/" + k.Subresource
	}
	if k.Group != "" {
		r += "." + k.Group
	}
	return fmt.Sprintf("%s %s -> %s", k.Verb, r, k.Code)
}

// secureRequestCounts reads apiserver_request_total of resource requests.
// Reading /metrics is itself no resource request, so it never counts.
func secureRequestCounts(ctx context.Context, t *testing.T, api *harness.APIServer) map[secureRequestKey]float64 {
	t.Helper()
	raw, err := api.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	out := map[secureRequestKey]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		end := strings.LastIndex(rest, "} ")
		if end < 0 {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(rest[:end], `",`) {
			k, v, _ := strings.Cut(kv, `="`)
			labels[k] = strings.TrimSuffix(v, `"`)
		}
		if labels["resource"] == "" {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(rest[end+2:], &v); err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		k := secureRequestKey{Group: labels["group"], Resource: labels["resource"], Subresource: labels["subresource"],
			Verb: labels["verb"], Code: labels["code"]}
		out[k] += v
	}
	return out
}

// secureWriteTemp writes content to name in dir and returns the path.
func secureWriteTemp(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// secureStartAgent is startAgent with more environment variables for the
// agent (POD_NAME and the like, or client-go's KUBE_FEATURE_* gates).
func secureStartAgent(t *testing.T, spec agentSpec, env ...string) *agent {
	t.Helper()
	spec.Env = append(spec.Env, env...)
	return startAgent(t, spec)
}
