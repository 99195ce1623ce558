// Package devicemanagerlink reaches the kubelet device manager's unexported
// constructor, the only one that takes the registration socket path.
//
// The exported devicemanager.NewManagerImpl always listens on
// /var/lib/kubelet/device-plugins/kubelet.sock and keeps its checkpoint next to
// it, which would need root and a private mount namespace in tests. The
// constructor below is the same code with the path as a parameter; its
// signature is pinned to k8s.io/kubernetes v1.37.2 (see the test module's
// go.mod) and checked by this package's test.
package devicemanagerlink

import (
	_ "unsafe" // for go:linkname

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// NewManager creates the kubelet's device manager with its registration
// socket (and checkpoint directory) at socketPath.
//
//go:linkname NewManager k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func NewManager(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*devicemanager.ManagerImpl, error)
