package main

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/featureplug/featureplug/cmd/internal/agent"
)

// Environment variables the manifests set from the downward API, naming
// the agent's Pod for --owner pod and daemonset (POD_NAMESPACE is also
// --namespace's default).
const (
	podNameEnv      = "POD_NAME"
	podNamespaceEnv = "POD_NAMESPACE"
	podUIDEnv       = "POD_UID"
)

// ownerConfig is the agent's OwnerConfig from --owner and the Pod's
// downward-API variables. Reading the Pod needs the API server; outside a
// Pod (no POD_NAME) or with --owner node it is not contacted.
func (f *runFlags) ownerConfig() (agent.OwnerConfig, error) {
	oc := agent.OwnerConfig{Mode: agent.OwnerMode(f.owner), PodName: os.Getenv(podNameEnv),
		PodNamespace: os.Getenv(podNamespaceEnv), PodUID: os.Getenv(podUIDEnv)}
	if oc.Mode == agent.OwnerNode || oc.PodName == "" || f.publish != string(agent.PublishNodeFeature) {
		return oc, nil
	}
	var cfg *rest.Config
	var err error
	if f.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return oc, fmt.Errorf("--owner %s: API server configuration: %w", f.owner, err)
	}
	cfg.UserAgent = "featureplug/" + version
	oc.Pods, err = agent.NewPodGetter(cfg, f.namespace)
	return oc, err
}
