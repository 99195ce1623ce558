package mps

import (
	"maps"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ComputeModeFunc sets the compute mode of the GPU with the given UUID and
// returns the mode it had before (discovery.SetComputeMode over the
// agent's NVML). An error wrapping a refusal (no privilege, no support) is
// logged once per GPU and MPS carries on in the GPU's current mode.
type ComputeModeFunc func(uuid string, mode nvml.ComputeMode) (prev nvml.ComputeMode, err error)

// computeModes puts the GPUs of MPS-shared resources in EXCLUSIVE_PROCESS
// compute mode, as NVIDIA's MPS daemon set-up does (one MPS server then
// owns the GPU and every CUDA client goes through it), and restores the mode
// each had when its last MPS resource goes away or the supervisor stops.
// It is used by Apply and Stop only, under Supervisor.modeMu.
type computeModes struct {
	set ComputeModeFunc
	s   *Supervisor

	// held maps the UUID of every GPU of an MPS resource to what was done
	// to it.
	held map[string]heldMode
	// warned lists the GPUs whose failed change was logged, once per GPU
	// for the supervisor's life.
	warned map[string]bool
}

// heldMode is what computeModes did to one GPU.
type heldMode struct {
	// exclusive is true when the GPU was switched (or already was) in
	// EXCLUSIVE_PROCESS; prev is then the mode to restore.
	exclusive bool
	prev      nvml.ComputeMode
}

// hold switches the GPUs in uuids that are not held yet, and retries the
// ones whose change failed before, to EXCLUSIVE_PROCESS.
func (c *computeModes) hold(uuids []string) {
	if c.set == nil {
		return
	}
	for _, uuid := range uuids {
		if h, ok := c.held[uuid]; ok && h.exclusive {
			continue
		}
		prev, err := c.set(uuid, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
		gauge := c.s.metrics.exclusive.WithLabelValues(uuid)
		if err != nil {
			c.held[uuid] = heldMode{}
			gauge.Set(0)
			if !c.warned[uuid] {
				c.warned[uuid] = true
				c.s.log.Warn("cannot set EXCLUSIVE_PROCESS compute mode on an MPS-shared GPU; MPS carries on in the GPU's current mode",
					"gpu", uuid, "error", err.Error())
			}
			continue
		}
		c.held[uuid] = heldMode{exclusive: true, prev: prev}
		gauge.Set(1)
		if prev != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
			c.s.log.Info("set EXCLUSIVE_PROCESS compute mode for MPS", "gpu", uuid, "previous", modeName(prev))
		}
	}
}

// release restores the mode of every held GPU not in keep.
func (c *computeModes) release(keep map[string]bool) {
	for _, uuid := range slices.Sorted(maps.Keys(c.held)) {
		if keep[uuid] {
			continue
		}
		h := c.held[uuid]
		delete(c.held, uuid)
		c.s.metrics.exclusive.DeleteLabelValues(uuid)
		if !h.exclusive || h.prev == nvml.COMPUTEMODE_EXCLUSIVE_PROCESS || c.set == nil {
			continue
		}
		if _, err := c.set(uuid, h.prev); err != nil {
			c.s.log.Warn("cannot restore the compute mode of a GPU no longer shared with MPS", "gpu", uuid, "mode", modeName(h.prev), "error", err.Error())
			continue
		}
		c.s.log.Info("restored compute mode after MPS", "gpu", uuid, "mode", modeName(h.prev))
	}
}

// modeName names a compute mode as nvidia-smi -c does.
func modeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return "DEFAULT"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "EXCLUSIVE_THREAD"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "PROHIBITED"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "EXCLUSIVE_PROCESS"
	default:
		return "UNKNOWN"
	}
}
