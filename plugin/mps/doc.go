// Package mps supervises NVIDIA MPS control daemons: one
// nvidia-cuda-mps-control daemon per resource that a rule shares with MPS.
//
// A Supervisor starts each daemon with `nvidia-cuda-mps-control -d` and the
// resource's own pipe and log directories (<root>/<resource with '/' as
// '_'>/pipe and /log) and CUDA_VISIBLE_DEVICES set to the resource's GPU
// UUIDs, then configures it through the control interface (the same binary
// without -d, one command per line on stdin): the default active thread
// percentage and a default pinned device memory limit per GPU. Pinned
// memory limits name GPUs by UUID, because inside the daemon the device
// ordinals count only the GPUs in CUDA_VISIBLE_DEVICES.
//
// Every check interval the supervisor asks each daemon a cheap question
// (get_default_active_thread_percentage). A daemon that does not answer is
// dead: its resource is marked not ready, and the daemon is started and
// configured again after a capped exponential backoff. A resource that goes
// away, and every resource on Stop, gets `quit`.
//
// Like NVIDIA's MPS set-up, the supervisor also switches the resources'
// GPUs to EXCLUSIVE_PROCESS compute mode before their daemon starts
// (Options.ComputeMode; restored when a GPU is no longer MPS-shared and on
// Stop; a refusal is logged once per GPU and MPS carries on), and creates
// the shared memory directory <root>/shm (mode 1777) that Allocate mounts
// as every MPS client's /dev/shm; it must also be the daemons' /dev/shm,
// which the supervisor checks (featureplug_mps_shm_shared). It is emptied,
// or removed, once no MPS resource is left.
//
// Sink is the agent's output over a Supervisor: it runs the daemons of a
// plan's MPS resources and, as a readiness gate, holds each such resource
// back (alone) until Ready says its daemon is up and configured; Ready's
// reason explains why not (for example "nvidia-cuda-mps-control not found
// in PATH"). The device plugins' Allocate responses point clients at the
// same pipe directory (plan.MPSLayout) and mount it.
package mps
