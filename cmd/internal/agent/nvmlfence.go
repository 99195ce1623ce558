package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlFailure returns the NVML error a discovery failed with, nil for a
// failure of another kind (a bad fake-node file, a sysfs read).
func nvmlFailure(err error) error {
	var ret nvml.Return
	if errors.As(err, &ret) && ret != nvml.SUCCESS {
		return err
	}
	return nil
}

// nvmlFailing takes a discovery that failed with an NVML error: the devices
// of every GPU of the last inventory are held Unhealthy (the tracker's
// fence, unless the policy turns it off), the node is labelled
// (nvmlLabels, sinks.go) and a Warning Event says why, once per failure. The
// last inventory stays, so the same device IDs come back when NVML answers.
func (a *Agent) nvmlFailing(ctx context.Context, err error) {
	was := a.nvmlDown
	a.nvmlDown = err
	var gpus []string
	if a.inv != nil {
		for _, g := range a.inv.GPUs {
			gpus = append(gpus, g.UUID)
		}
	}
	a.health.NVMLFailing(gpus, err)
	a.metrics.nvmlAvailable.Set(0)
	if was != nil {
		return
	}
	a.nvmlSince = time.Now()
	msg := fmt.Sprintf("NVML fails (%v): the %d GPUs it cannot reach are advertised Unhealthy until it answers again", err, len(gpus))
	a.log.Error(msg, "gpus", len(gpus))
	a.warnEvent("NVMLUnavailable", msg)
	a.applyLastGood(ctx) // publishes the label
}

// nvmlFailingAtStart takes a first discovery that failed with an NVML
// error: no GPU is known, so none is advertised; /readyz, the label and a
// Warning Event say why until a re-discovery succeeds.
func (a *Agent) nvmlFailingAtStart(err error) {
	a.nvmlDown, a.nvmlSince = err, time.Now()
	a.health.NVMLFailing(nil, err)
	a.metrics.nvmlAvailable.Set(0)
	msg := fmt.Sprintf("NVML fails at start (%v): no GPU is advertised until it answers", err)
	a.log.Error(msg, "rediscoverInterval", a.cfg.RediscoverInterval)
	a.warnEvent("NVMLUnavailable", msg)
}

// nvmlAnswers takes a discovery that succeeded: a failure before ends, its
// devices are Healthy again (unless a hold keeps them) and the label goes.
func (a *Agent) nvmlAnswers(ctx context.Context) {
	a.metrics.nvmlAvailable.Set(1)
	if a.nvmlDown == nil {
		return
	}
	a.nvmlDown = nil
	a.health.NVMLAnswers()
	a.log.Info("NVML answers again; its GPUs are served as their health says", "failedFor", time.Since(a.nvmlSince).Round(time.Second))
	if a.events != nil {
		a.events.Normal("NVMLAvailable", "NVML answers again after "+time.Since(a.nvmlSince).Round(time.Second).String())
	}
	a.applyLastGood(ctx)
}

// nvmlReady is /readyz's view of NVML: an error saying since when and why
// it fails.
func (a *Agent) nvmlReady() error {
	since, err := a.health.NVMLFailure()
	if err == nil {
		return nil
	}
	return fmt.Errorf("NVML fails since %s (%v): every device of its GPUs is advertised Unhealthy", since.UTC().Format(time.RFC3339), err)
}
