// Package plugin serves featureplug's resources to the kubelet through the
// device-plugin API v1beta1: one gRPC server per resource name of a
// plan.Plan, each on its own unix socket in the kubelet's device-plugin
// directory.
//
// A Manager owns the servers. Apply diffs a new Plan against the running one:
// new resources get a server, removed ones lose theirs, and a changed device
// set is pushed on the open ListAndWatch streams without re-registering.
// Run owns the one file-system watcher on the device-plugin directory: when
// kubelet.sock is re-created (a kubelet restart) every server registers
// again, and a server whose own socket vanished is restarted. When the
// directory itself is deleted, the watch moves to its nearest existing
// ancestor and back onto the directory when it reappears ("device-plugin
// directory removed" at WARN, "device-plugin directory is back" at INFO). A
// periodic check (Options.WatchBackstop, a few stat calls) catches what
// the watch misses, and does all the watching, with a WARN and
// featureplug_plugin_watch_fallback 1, when no inotify instance can be had.
// On start, featureplug's own sockets (featureplug-*.sock) that the plan
// does not serve are removed; other sockets are never touched.
//
// Registration retries start at 1 ms and double (1, 2, 4, 8 ms ... up to
// 10 s): a kubelet that has bound kubelet.sock but is not listening yet
// refuses the first dial, and the next try a millisecond or two later
// finds it listening. Only the first failure of a run of failures is
// logged at once; later ones are summarized at most every 30 s.
// Manager.Ready follows the registration state: it is true while every
// resource of the current plan is registered with the kubelet that owns
// kubelet.sock now.
//
// Health events from discovery mark devices Unhealthy (a whole GPU with its
// MIG devices and replicas, or a single MIG device with its replicas); a
// device recovers after a quiet period without new events. With
// Options.StateDir, the unhealthy records (device, kind, XID, first and
// last event, recovery deadline) are kept in StateDir/health.json, written
// atomically at once when a device turns Unhealthy and at most every few
// seconds while a storm only moves deadlines, so a restarted agent
// advertises them Unhealthy from its first ListAndWatch until their
// deadline. Health events are logged per device as the first event, then
// one summary line per 10 s with counts by kind and XID; the
// featureplug_plugin_health_events_total counter counts every event, its
// xid label bounded to a table of known XIDs and "other".
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
