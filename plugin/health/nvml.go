package health

import (
	"slices"
	"time"

	"github.com/featureplug/featureplug/discovery"
)

// SourceNVML is the condition source of NVML failing (NVMLFailing).
const SourceNVML = "nvml"

// KindNVMLUnavailable is the condition kind, and the reason, of the
// devices of GPUs NVML cannot reach while it fails as a whole.
const KindNVMLUnavailable discovery.HealthEventKind = "nvml-unavailable"

// ReasonNVMLUnavailable is KindNVMLUnavailable as a reason label.
const ReasonNVMLUnavailable = string(KindNVMLUnavailable)

// NVMLFailing records that NVML fails (every call answers an error, the
// driver is gone): with the policy's fenceOnNVMLFailure (the default),
// every device of gpus is Unhealthy until NVMLAnswers, so that a node
// whose GPUs nobody can check does not keep advertising them. err says
// why, in the devices' messages and NVMLFailure.
func (t *Tracker) NVMLFailing(gpus []string, err error) {
	t.mu.Lock()
	if t.nvmlErr == nil {
		t.nvmlSince = t.opts.Clock.Now()
	}
	t.nvmlErr = err
	t.nvmlGPUs = slices.Clone(gpus)
	t.mu.Unlock()
	t.applyNVMLFence()
}

// NVMLAnswers records that NVML answers again: the NVMLFailing fence ends.
func (t *Tracker) NVMLAnswers() {
	t.mu.Lock()
	was := t.nvmlErr != nil
	t.nvmlErr, t.nvmlGPUs = nil, nil
	t.mu.Unlock()
	if was {
		t.SetConditions(SourceNVML, nil)
	}
}

// NVMLFailure returns since when and why NVML fails; a nil error while
// it answers.
func (t *Tracker) NVMLFailure() (time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nvmlSince, t.nvmlErr
}

// applyNVMLFence sets or clears the NVML conditions as NVML's state and
// the policy's fenceOnNVMLFailure say.
func (t *Tracker) applyNVMLFence() {
	t.mu.Lock()
	err, gpus, fence := t.nvmlErr, t.nvmlGPUs, t.policy.Fences()
	t.mu.Unlock()
	if err == nil || !fence {
		t.SetConditions(SourceNVML, nil)
		return
	}
	conds := make(map[string]Condition, len(gpus))
	for _, g := range gpus {
		conds[g] = Condition{Kind: KindNVMLUnavailable, Reason: "NVML fails (" + err.Error() + ")"}
	}
	t.SetConditions(SourceNVML, conds)
}
