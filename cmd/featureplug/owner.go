package main

import (
	"os"

	"github.com/featureplug/featureplug/cmd/internal/kube"
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
// downward-API variables; the Pod is read through client, the agent's one
// API client (nil without an API server, when nothing is published to it).
func (f *runFlags) ownerConfig(client kube.Interface) kube.OwnerConfig {
	oc := kube.OwnerConfig{Mode: kube.OwnerMode(f.owner), PodName: os.Getenv(podNameEnv),
		PodNamespace: os.Getenv(podNamespaceEnv), PodUID: os.Getenv(podUIDEnv)}
	if client != nil {
		oc.Pods = client.Pods(f.namespace)
	}
	return oc
}
