package labeler

import (
	kubefake "k8s.io/client-go/kubernetes/fake"
	nfdfake "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned/fake"
)

// nfdOf and nodesOf hand the publisher the fake clientsets' typed clients
// (NodeFeatureConfig takes narrow interfaces, see kubeclient.go).
func nfdOf(cs *nfdfake.Clientset) NFDClient { return NFDClientOf(cs.NfdV1alpha1().NodeFeatures) }

func nodesOf(cs *kubefake.Clientset) NodeGetter { return cs.CoreV1().Nodes() }
