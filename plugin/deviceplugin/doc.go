// Package deviceplugin serves featureplug's resources to the kubelet
// through the device-plugin API v1beta1: one gRPC server per resource name
// of a plan.Plan, each on its own unix socket in the kubelet's
// device-plugin directory. Sink is the agent's output over it: it serves
// the plan's resources whose API is plan.ServeDevicePlugin and that no
// readiness gate holds back.
//
// A Manager owns the servers. Apply diffs a new Plan against the running one:
// new resources get a server, removed ones lose theirs, and a changed device
// set is pushed on the open ListAndWatch streams without re-registering.
// Run watches the device-plugin directory through the agent's file watcher
// (Options.Watcher, package fswatch): after every change there, and at
// every periodic check of the watcher, the manager looks at the directory
// (check): when kubelet.sock was made again (a kubelet restart, told apart
// by its inode and change time, so that a socket made again in place with
// the old inode is seen too) every server registers again; a server whose
// own socket vanished is restarted; when the directory itself is deleted
// every server loses its registration ("device-plugin directory removed"
// at WARN) and comes back with it ("device-plugin directory is back" at
// INFO). Without an inotify instance the periodic check does all of it,
// with featureplug_plugin_watch_fallback 1. On start, featureplug's own
// sockets (featureplug-*.sock) that no process listens on are removed;
// other sockets, and those another agent serves, are never touched.
//
// Two agents on one node (a rolling update with maxSurge) serve side by
// side, each server on the first free socket slot of its resource
// (handover.go): the kubelet keeps both endpoints and goes on with the
// remaining one when the other's stream ends. A server keeps at most
// maxListAndWatchStreams ListAndWatch streams open and refuses more with
// ResourceExhausted.
//
// Registration retries start at 1 ms and double (1, 2, 4, 8 ms ... up to
// 10 s): a kubelet that has bound kubelet.sock but is not listening yet
// refuses the first dial, and the next try a millisecond or two later
// finds it listening. Only the first failure of a run of failures is
// logged at once; later ones are summarized at most every 30 s.
// Manager.Ready follows the registration state: it is true while every
// resource of the current plan is registered with the kubelet that owns
// kubelet.sock now (compared by identity at every call, so that a kubelet
// restart nobody has noticed yet makes it false).
//
// Device health comes from the health tracker (Options.Health, package
// health): an Unhealthy device is advertised Unhealthy, on every resource
// it backs (a whole GPU with its MIG devices and replicas, or a single MIG
// device with its replicas), and recovers when the tracker says so.
//
// # Request handling
//
// Requests larger than 1 MiB are refused by gRPC with ResourceExhausted.
// Errors name at most five device IDs (each cut to 64 bytes) and count the
// rest. Allocate refuses, per container request:
//   - unknown or repeated device IDs, and more IDs than the resource has:
//     InvalidArgument;
//   - a device that is Unhealthy right now (as advertised on ListAndWatch):
//     FailedPrecondition, naming it. The kubelet may race a health change;
//     refusing makes the pod fail admission rather than start on a failed
//     GPU.
//
// GetPreferredAllocation never picks an Unhealthy device from the
// available ones, even when the kubelet offers it. Must-include devices are
// kept whatever their health (the kubelet ignores an answer without them;
// Allocate then refuses the Unhealthy one). When the healthy available
// devices are too few for the size, it answers FailedPrecondition.
//
// Allocation uses only data computed when the Plan was applied: the link
// matrix scores are precomputed per resource, so GetPreferredAllocation and
// Allocate never touch NVML.
package deviceplugin
