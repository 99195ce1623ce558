// Package kubeclientset adapts client-go's and NFD's generated clientsets
// to kube.Interface, so that tests can hand the agent their fake
// clientsets. Only tests and tools import it: it links every typed client
// of client-go, which the agent's binary leaves out (see package kube).
package kubeclientset

import (
	"k8s.io/client-go/kubernetes"
	nfdclientset "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned"

	"github.com/featureplug/featureplug/cmd/internal/events"
	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/dra"
)

// New returns kube and nfd as a kube.Interface.
func New(kube kubernetes.Interface, nfd nfdclientset.Interface) kube.Interface {
	return clientsets{kube: kube, nfd: nfd}
}

type clientsets struct {
	kube kubernetes.Interface
	nfd  nfdclientset.Interface
}

func (c clientsets) Nodes() kube.Nodes { return c.kube.CoreV1().Nodes() }

func (c clientsets) Events(namespace string) events.Events { return c.kube.CoreV1().Events(namespace) }

func (c clientsets) NodeFeatures(namespace string) labeler.NodeFeatures {
	return c.nfd.NfdV1alpha1().NodeFeatures(namespace)
}

func (c clientsets) ConfigMaps(namespace string) kube.ConfigMaps {
	return c.kube.CoreV1().ConfigMaps(namespace)
}

func (c clientsets) Pods(namespace string) kube.Pods { return c.kube.CoreV1().Pods(namespace) }

func (c clientsets) ResourceSlices() dra.ResourceSlices { return c.kube.ResourceV1().ResourceSlices() }

func (c clientsets) ResourceClaims(namespace string) dra.ResourceClaims {
	return c.kube.ResourceV1().ResourceClaims(namespace)
}

func (c clientsets) DeviceClasses() kube.DeviceClasses { return c.kube.ResourceV1().DeviceClasses() }

// IsWatchListSemanticsUnSupported passes on the wrapped clientset's answer
// (client-go's fake says true), which client-go's informers ask of the
// client they are given (util/watchlist).
func (c clientsets) IsWatchListSemanticsUnSupported() bool {
	u, ok := c.kube.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}
