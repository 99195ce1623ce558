package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// OwnerMode says what owns the agent's NodeFeature object, so what its
// deletion garbage-collects it (and nfd-master then removes the labels).
type OwnerMode string

// Owner modes (run --owner).
const (
	// OwnerDaemonSet: the agent's Pod and the DaemonSet that owns it, as
	// nfd-worker does it: the object survives the Pod's replacement (the
	// DaemonSet still owns it, so labels do not vanish and come back, NFD
	// issues #1752, #1817, #2039) and goes when the DaemonSet is deleted
	// (uninstall, rollback). The default.
	OwnerDaemonSet OwnerMode = "daemonset"
	// OwnerPod: the agent's Pod only: the object goes with every Pod.
	OwnerPod OwnerMode = "pod"
	// OwnerNode: the Node: the object survives uninstalls and goes only
	// with the Node.
	OwnerNode OwnerMode = "node"
)

// OwnerConfig names the agent's Pod for OwnerPod and OwnerDaemonSet; the
// manifests pass it through the downward API (POD_NAME, POD_UID and the
// namespace, POD_NAMESPACE).
type OwnerConfig struct {
	// Mode is what owns the object; "" means OwnerDaemonSet.
	Mode OwnerMode
	// Pods reads the agent's Pod (Interface's Pods; client-go's typed
	// PodInterface satisfies it); required for OwnerPod and OwnerDaemonSet
	// when PodName is set.
	Pods Pods
	// PodName, PodNamespace and PodUID identify the agent's Pod. Without
	// PodName the Node owns the object (an agent run outside a Pod), with
	// a warning; likewise when the Pod is not in the NodeFeature's
	// namespace, since an owner must be in its dependent's namespace (the
	// garbage collector would delete the object at once). PodNamespace ""
	// means the NodeFeature's. The Pod is read for its UID, which must be
	// PodUID when set.
	PodName      string
	PodNamespace string
	PodUID       string
}

// OwnerResolver returns the labeler's NodeFeatureConfig.Owners for cfg, or
// nil when the Node owns the object. The Pod is read once per call (the
// publisher calls it on create and caches the answer): its UID when not
// given, and its controller reference to a DaemonSet. RBAC: get pods in
// the agent's namespace.
func OwnerResolver(namespace string, cfg OwnerConfig, log *slog.Logger) (func(context.Context) ([]metav1.OwnerReference, error), error) {
	switch cfg.Mode {
	case OwnerNode:
		return nil, nil
	case "", OwnerDaemonSet, OwnerPod:
	default:
		return nil, fmt.Errorf("--owner: %q is not an owner (use daemonset, pod or node)", cfg.Mode)
	}
	mode := cfg.Mode
	if mode == "" {
		mode = OwnerDaemonSet
	}
	if cfg.PodName == "" {
		log.Warn("no POD_NAME: the NodeFeature is owned by the Node (uninstalling featureplug will not remove it)", "owner", mode)
		return nil, nil
	}
	if cfg.PodNamespace != "" && cfg.PodNamespace != namespace {
		log.Warn("the agent's Pod is not in the NodeFeature's namespace, and owners must be: the NodeFeature is owned by the Node (uninstalling featureplug will not remove it)",
			"owner", mode, "podNamespace", cfg.PodNamespace, "namespace", namespace)
		return nil, nil
	}
	if cfg.Pods == nil {
		return nil, errors.New("--owner " + string(mode) + ": no API client to read the agent's Pod")
	}
	return func(ctx context.Context) ([]metav1.OwnerReference, error) {
		pod, err := cfg.Pods.Get(ctx, cfg.PodName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("--owner %s: get Pod %s/%s (the agent's own, from POD_NAME): %w (featureplug's RBAC must allow get on pods in namespace %q)",
				mode, namespace, cfg.PodName, err, namespace)
		}
		if cfg.PodUID != "" && types.UID(cfg.PodUID) != pod.UID {
			return nil, fmt.Errorf("--owner %s: Pod %s/%s has UID %s, not POD_UID %s: not the agent's Pod", mode, namespace, cfg.PodName, pod.UID, cfg.PodUID)
		}
		owners := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}
		if mode == OwnerPod {
			return owners, nil
		}
		for _, ref := range pod.OwnerReferences {
			if ref.APIVersion == "apps/v1" && ref.Kind == "DaemonSet" && ref.Controller != nil && *ref.Controller {
				return append(owners, metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}), nil
			}
		}
		log.Warn("the agent's Pod has no DaemonSet controller: the NodeFeature is owned by the Pod only", "pod", namespace+"/"+pod.Name)
		return owners, nil
	}, nil
}
