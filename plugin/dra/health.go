package dra

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
)

// Device health reporting to the kubelet (DRAResourceHealth).
const (
	// HealthCheckTimeout is the health_check_timeout_seconds sent with
	// every device: the kubelet takes a device it has not heard of for
	// this long as Unknown. It is three heartbeats, so one late or lost
	// message never turns a device Unknown.
	HealthCheckTimeout = 60 * time.Second
	// HealthHeartbeat is how often a stream sends the full device list
	// again while nothing changes, well inside HealthCheckTimeout.
	HealthHeartbeat = 20 * time.Second
	// maxHealthStreams bounds the NodeWatchResources streams open at once:
	// the kubelet keeps one, and opens another only after losing it.
	maxHealthStreams = 4
)

// healthState is the Node's part for DRAResourceHealth: the streams open
// and the channel that wakes them when the Table changes. Its zero value
// is ready.
type healthState struct {
	mu      sync.Mutex
	wake    chan struct{} // closed by TableChanged; nil until a stream waits
	streams int
}

// TableChanged tells the device health streams that the Table (its
// devices or their health) may have changed: each sends the full list
// again if its health differs from what it sent last. The DRA sink calls
// it after swapping in a new Table. It is harmless before Run, after it,
// and without streams.
func (n *Node) TableChanged() {
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	if n.health.wake != nil {
		close(n.health.wake)
		n.health.wake = nil
	}
}

// healthWaiter returns the channel the next TableChanged closes.
func (n *Node) healthWaiter() <-chan struct{} {
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	if n.health.wake == nil {
		n.health.wake = make(chan struct{})
	}
	return n.health.wake
}

// registerHealth registers the device health service, v1 and (through
// the kubelet API's wrapper) v1alpha1, on srv.
func (n *Node) registerHealth(srv *grpc.Server) {
	svc := &healthService{n: n}
	drahealthv1.RegisterDRAResourceHealthServer(srv, svc)
	drahealthv1alpha1.RegisterDRAResourceHealthServer(srv, drahealthv1.V1ServerWrapper{Server: svc})
}

// healthEntry is one device's health as reported: what a stream compares
// to tell whether to send again.
type healthEntry struct {
	device string
	// why is the reason it is unhealthy, "" when healthy.
	why string
}

// healthList returns the health of the Table's devices, sorted by name.
func (n *Node) healthList() []healthEntry {
	t := n.opts.Table()
	if t == nil {
		return nil
	}
	out := make([]healthEntry, 0, len(t.byName))
	for name, d := range t.byName {
		out = append(out, healthEntry{device: name, why: d.Unhealthy})
	}
	slices.SortFunc(out, func(a, b healthEntry) int { return cmp.Compare(a.device, b.device) })
	return out
}

// healthResponse is the full report of list, stamped now.
func (n *Node) healthResponse(list []healthEntry) *drahealthv1.NodeWatchResourcesResponse {
	now := n.opts.Clock.Now().Unix()
	devs := make([]*drahealthv1.DeviceHealth, 0, len(list))
	for _, e := range list {
		h := drahealthv1.HealthStatus_HEALTHY
		if e.why != "" {
			h = drahealthv1.HealthStatus_UNHEALTHY
		}
		devs = append(devs, &drahealthv1.DeviceHealth{
			Device:                    &drahealthv1.DeviceIdentifier{PoolName: n.opts.NodeName, DeviceName: e.device},
			Health:                    h,
			LastUpdatedTime:           now,
			HealthCheckTimeoutSeconds: int64(HealthCheckTimeout / time.Second),
			Message:                   e.why,
		})
	}
	return &drahealthv1.NodeWatchResourcesResponse{Devices: devs}
}

// healthStreamStart counts a new stream in; false when maxHealthStreams
// are open.
func (n *Node) healthStreamStart() (int, bool) {
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	if n.health.streams >= maxHealthStreams {
		return n.health.streams, false
	}
	n.health.streams++
	n.metrics.healthStreams.Set(float64(n.health.streams))
	return n.health.streams, true
}

// healthStreamEnd counts a stream out.
func (n *Node) healthStreamEnd() int {
	n.health.mu.Lock()
	defer n.health.mu.Unlock()
	n.health.streams--
	n.metrics.healthStreams.Set(float64(n.health.streams))
	return n.health.streams
}

// healthService is the DRAResourceHealth service (v1) of the Node.
type healthService struct {
	drahealthv1.UnsafeDRAResourceHealthServer
	n *Node
}

var _ drahealthv1.DRAResourceHealthServer = (*healthService)(nil)

// NodeWatchResources implements drahealthv1.DRAResourceHealthServer. It
// sends the health of every device of the Table at once (pool: the node
// name; device: the ResourceSlice name; HEALTHY, or UNHEALTHY with the
// taint's reason as message; HealthCheckTimeout), then the full list
// again whenever TableChanged brings a different one, and at every
// HealthHeartbeat, until the stream ends or the Node stops (which ends
// its server's streams). A device that leaves the Table is no longer
// reported. More than maxHealthStreams at once are refused with
// ResourceExhausted.
func (h *healthService) NodeWatchResources(_ *drahealthv1.NodeWatchResourcesRequest, stream drahealthv1.DRAResourceHealth_NodeWatchResourcesServer) error {
	n := h.n
	open, ok := n.healthStreamStart()
	if !ok {
		n.log.Warn("refusing a DRA device health stream: too many open", "open", open, "max", maxHealthStreams)
		return status.Errorf(codes.ResourceExhausted, "DRA device health: %d NodeWatchResources streams open already, the most this driver serves", open)
	}
	n.log.Debug("DRA device health stream started", "open", open)
	ctx := stream.Context()
	// The ticker exists before the first message: a step of a fake clock
	// after that message reaches it.
	tick := n.opts.Clock.NewTicker(HealthHeartbeat)
	defer tick.Stop()
	err := func() error {
		var sent []healthEntry
		force := true // the first message, and each heartbeat
		for {
			wake := n.healthWaiter()
			list := n.healthList()
			if force || !slices.Equal(list, sent) {
				if err := stream.Send(n.healthResponse(list)); err != nil {
					return err
				}
				sent, force = list, false
			}
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
			case <-tick.C():
				force = true
			}
		}
	}()
	left := n.healthStreamEnd()
	n.log.Debug("DRA device health stream ended", "open", left, "err", err)
	return err
}
