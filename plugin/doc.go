// Package plugin serves featureplug's resources to the kubelet through the
// device-plugin API v1beta1: one gRPC server per resource name of a
// rules.Plan, each on its own unix socket in the kubelet's device-plugin
// directory.
//
// A Manager owns the servers. Apply diffs a new Plan against the running one:
// new resources get a server, removed ones lose theirs, and a changed device
// set is pushed on the open ListAndWatch streams without re-registering.
// Run owns the one file-system watcher on the device-plugin directory: when
// kubelet.sock is re-created (a kubelet restart) every server registers
// again, and a server whose own socket vanished is restarted.
//
// Health events from discovery mark devices Unhealthy (a whole GPU with its
// MIG devices and replicas, or a single MIG device with its replicas); a
// device recovers after a quiet period without new events.
//
// Allocation uses only data computed when the Plan was applied: the link
// matrix scores are precomputed per resource, so GetPreferredAllocation and
// Allocate never touch NVML.
package plugin
