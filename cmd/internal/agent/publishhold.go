package agent

import (
	"context"
	"time"
)

// DefaultPublishHold is Config.PublishHold of `featureplug run`: long
// enough for a kubelet that is up to accept every resource (a few
// milliseconds), short enough that a node whose kubelet is not up yet gets
// its labels without a noticeable delay.
const DefaultPublishHold = time.Second

// holdForRegistration waits until the kubelet has accepted every resource
// of the plan the device-plugin sink serves, or Config.PublishHold has
// passed, or ctx ends: register first. An agent without the device-plugin
// sink does not wait.
func (a *Agent) holdForRegistration(ctx context.Context) {
	if a.cfg.PublishHold <= 0 || a.cfg.NoDevicePlugins {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.PublishHold)
	defer cancel()
	if !a.manager.WaitReady(ctx) && ctx.Err() == context.DeadlineExceeded {
		a.log.Debug("publishing before the kubelet accepted every resource", "waited", a.cfg.PublishHold)
	}
}
