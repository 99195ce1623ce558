package health

import (
	"context"
	"sync"
	"time"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// DefaultVFIOProbeInterval is how often the VFIO probe looks at the GPUs
// passed through to VMs: a GPU that leaves vfio-pci or the PCI bus is
// Unhealthy within this period (plus the kubelet's ListAndWatch update),
// and Healthy again within it once it is back.
const DefaultVFIOProbeInterval = 5 * time.Second

// vfioSource names the VFIO probe's conditions in the tracker.
const vfioSource = "vfio"

// VFIOProbe keeps the health of the plan's GPUs passed through to VMs in
// the tracker: NVML has no events for them, so it reads their binding from
// sysfs (discovery.CheckVFIODevice) when a plan is applied and then every
// interval, and holds each GPU that fails Unhealthy (a Condition) until a
// look finds it well. It is an agent sink (Check, Apply) and runner (Run),
// applied before the sinks that serve the devices, so that their first
// device list already has the health of a new plan's devices.
type VFIOProbe struct {
	tracker  *Tracker
	root     string
	interval time.Duration

	mu      sync.Mutex
	devices []vfioTarget
}

// vfioTarget is one GPU the probe looks at.
type vfioTarget struct {
	key   string // the plan device's GPUUUID, the tracker's key
	addr  string
	group int
}

// NewVFIOProbe returns a probe that reads sysfs under root (as discovery
// does: "/", or where the host's /sys and /dev are mounted) every interval
// (0: DefaultVFIOProbeInterval) and records in t.
func NewVFIOProbe(t *Tracker, root string, interval time.Duration) *VFIOProbe {
	if interval <= 0 {
		interval = DefaultVFIOProbeInterval
	}
	if root == "" {
		root = "/"
	}
	return &VFIOProbe{tracker: t, root: root, interval: interval}
}

// Name implements the agent's Sink.
func (p *VFIOProbe) Name() string { return "VFIO health" }

// Check implements the agent's Sink: the probe takes every plan.
func (p *VFIOProbe) Check(*discovery.Inventory, *plan.Plan) error { return nil }

// Apply implements the agent's Sink: it probes the VFIO GPUs of pl (every
// VFIO resource, whatever API serves it) at once, and from then on.
func (p *VFIOProbe) Apply(_ context.Context, _ *discovery.Inventory, pl *plan.Plan) error {
	var devices []vfioTarget
	if pl != nil {
		for _, r := range pl.VFIO {
			for _, d := range r.Devices {
				if d.VFIO != nil {
					devices = append(devices, vfioTarget{key: d.GPUUUID, addr: d.VFIO.PCIAddress, group: d.VFIO.IOMMUGroup})
				}
			}
		}
	}
	p.mu.Lock()
	p.devices = devices
	p.mu.Unlock()
	p.probe()
	return nil
}

// Run implements the agent's Runner: it probes every interval until ctx
// ends.
func (p *VFIOProbe) Run(ctx context.Context) error {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			p.probe()
		}
	}
}

// probe looks at every GPU once and sets the tracker's VFIO conditions.
// The lock keeps a probe of an older plan from landing after a newer one.
func (p *VFIOProbe) probe() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var conds map[string]Condition
	for _, d := range p.devices {
		if why, bad := discovery.CheckVFIODevice(p.root, d.addr, d.group); bad {
			if conds == nil {
				conds = map[string]Condition{}
			}
			conds[d.key] = Condition{Kind: why.Kind, Reason: why.Reason}
		}
	}
	p.tracker.SetConditions(vfioSource, conds)
}
