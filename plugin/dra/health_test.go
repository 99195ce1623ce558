package dra

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// healthTestStart is the fake clock's time when a health test starts.
var healthTestStart = time.Unix(1_800_000_000, 0)

// healthEnv is a running Node whose Table the test swaps, on a fake
// clock.
type healthEnv struct {
	*nodeEnv
	clock *clocktesting.FakeClock
	table atomic.Pointer[Table]
}

// newHealthEnv runs a Node serving nodeTable on a fake clock.
func newHealthEnv(t *testing.T) *healthEnv {
	t.Helper()
	h := &healthEnv{clock: clocktesting.NewFakeClock(healthTestStart)}
	h.table.Store(nodeTable())
	h.nodeEnv = newNodeEnv(t, "", &nodeClaims{}, h.table.Load)
	h.n.opts.Clock = h.clock
	h.start()
	return h
}

// setTable swaps in devs as the Table and tells the Node, as the DRA
// sink does.
func (h *healthEnv) setTable(devs []Device) {
	h.table.Store(NewTable(devs))
	h.n.TableChanged()
}

// watch opens a v1 NodeWatchResources stream, as the 1.37 kubelet does.
func (h *healthEnv) watch() grpc.ServerStreamingClient[drahealthv1.NodeWatchResourcesResponse] {
	h.t.Helper()
	s, err := drahealthv1.NewDRAResourceHealthClient(h.dial(h.n.PluginSocket())).
		NodeWatchResources(h.ctx(), &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		h.t.Fatalf("NodeWatchResources: %v", err)
	}
	return s
}

// recv receives the next message of s, failing the test on an error.
func (h *healthEnv) recv(s grpc.ServerStreamingClient[drahealthv1.NodeWatchResourcesResponse]) *drahealthv1.NodeWatchResourcesResponse {
	h.t.Helper()
	m, err := s.Recv()
	if err != nil {
		h.t.Fatalf("NodeWatchResources: Recv: %v; logs:\n%s", err, h.logs)
	}
	return m
}

// healthDevices describes a report as "pool/device HEALTH message" lines,
// checking the timeout and that every device was stamped at.
func healthDevices(t *testing.T, m *drahealthv1.NodeWatchResourcesResponse, at time.Time) []string {
	t.Helper()
	var out []string
	for _, d := range m.GetDevices() {
		if got := d.GetHealthCheckTimeoutSeconds(); got != 60 {
			t.Errorf("device %s: health_check_timeout_seconds %d, want 60", d.GetDevice().GetDeviceName(), got)
		}
		if got := d.GetLastUpdatedTime(); got != at.Unix() {
			t.Errorf("device %s: last_updated_time %d, want %d (start%+d s)", d.GetDevice().GetDeviceName(), got, at.Unix(), got-healthTestStart.Unix())
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s/%s %s %s", d.GetDevice().GetPoolName(), d.GetDevice().GetDeviceName(), d.GetHealth(), d.GetMessage())))
	}
	return out
}

// healthAllHealthy is nodeTable's report with every device healthy.
var healthAllHealthy = []string{"node-a/gpu-0000 HEALTHY", "node-a/gpu-nocdi HEALTHY", "node-a/mig-1111 HEALTHY"}

// healthExpect fails the test unless m reports want, stamped at.
func healthExpect(t *testing.T, what string, m *drahealthv1.NodeWatchResourcesResponse, at time.Time, want []string) {
	t.Helper()
	if got := healthDevices(t, m, at); !slices.Equal(got, want) {
		t.Fatalf("%s: got\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestHealthGetInfo: the registration lists the device health service,
// v1 then v1alpha1, after the DRA services, so that the kubelet picks
// v1.DRAPlugin for claims and v1.DRAResourceHealth for health.
func TestHealthGetInfo(t *testing.T) {
	e := newHealthEnv(t)
	info, err := registerapi.NewRegistrationClient(e.dial(e.n.RegistrationSocket())).GetInfo(e.ctx(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := info.GetSupportedVersions()
	if len(got) == 0 || got[0] != "v1.DRAPlugin" {
		t.Fatalf("supported versions %q: the first must be v1.DRAPlugin", got)
	}
	i := slices.Index(got, drahealthv1.DRAResourceHealthService)
	j := slices.Index(got, drahealthv1alpha1.DRAResourceHealthService)
	if i < 0 || j < 0 || i > j {
		t.Fatalf("supported versions %q: want %s, then %s", got, drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService)
	}
}

// TestHealthFullListAtOnce: a new stream gets every device of the Table
// at once, healthy, in the node's pool, with the timeout, over v1 and
// v1alpha1 alike; the open streams are counted.
func TestHealthFullListAtOnce(t *testing.T) {
	e := newHealthEnv(t)
	healthExpect(t, "v1 first message", e.recv(e.watch()), healthTestStart, healthAllHealthy)

	old, err := drahealthv1alpha1.NewDRAResourceHealthClient(e.dial(e.n.PluginSocket())).
		NodeWatchResources(e.ctx(), &drahealthv1alpha1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := old.Recv()
	if err != nil {
		t.Fatalf("v1alpha1 Recv: %v", err)
	}
	healthExpect(t, "v1alpha1 first message", drahealthv1.NodeWatchResourcesResponseFromV1Alpha1(m), healthTestStart, healthAllHealthy)
	// Both streams have sent, so both are counted.
	if got := e.metric("featureplug_dra_health_streams", "", ""); got != 2 {
		t.Errorf("featureplug_dra_health_streams = %v, want 2", got)
	}
}

// TestHealthUnhealthyOnTableChange: a new Table with a device unhealthy
// sends the full list with that device UNHEALTHY and the reason as the
// message; a new Table with the same health sends nothing (the marker:
// the next change is the next message); a device that leaves the Table
// is no longer reported; recovery is reported.
func TestHealthUnhealthyOnTableChange(t *testing.T) {
	e := newHealthEnv(t)
	s := e.watch()
	healthExpect(t, "first message", e.recv(s), healthTestStart, healthAllHealthy)

	devs := []Device{
		{Name: "gpu-0000", Resource: "example.com/a100"},
		{Name: "mig-1111", Resource: "example.com/mig-1g", Unhealthy: "xid-79"},
		{Name: "gpu-nocdi", Resource: "example.com/a100"},
	}
	e.setTable(devs)
	healthExpect(t, "after the XID", e.recv(s), healthTestStart,
		[]string{"node-a/gpu-0000 HEALTHY", "node-a/gpu-nocdi HEALTHY", "node-a/mig-1111 UNHEALTHY xid-79"})

	// Same health (other CDI IDs): nothing to send.
	devs[0].CDIDevices = []string{"k8s.featureplug.io/gpu=other"}
	e.setTable(devs)
	// The device leaves: sent (and, had the previous change been sent,
	// it would be received first).
	e.setTable(devs[:2])
	healthExpect(t, "after gpu-nocdi left", e.recv(s), healthTestStart,
		[]string{"node-a/gpu-0000 HEALTHY", "node-a/mig-1111 UNHEALTHY xid-79"})

	devs[1].Unhealthy = ""
	e.setTable(devs[:2])
	healthExpect(t, "after recovery", e.recv(s), healthTestStart,
		[]string{"node-a/gpu-0000 HEALTHY", "node-a/mig-1111 HEALTHY"})
}

// TestHealthHeartbeat: with nothing changing, the full list is sent again
// every HealthHeartbeat, and not before: after a step just short of it,
// the next message is the one the heartbeat sends (stamped with its
// time).
func TestHealthHeartbeat(t *testing.T) {
	e := newHealthEnv(t)
	s := e.watch()
	healthExpect(t, "first message", e.recv(s), healthTestStart, healthAllHealthy)

	e.clock.Step(HealthHeartbeat - time.Second)
	e.n.TableChanged() // same Table: nothing to send
	e.clock.Step(time.Second)
	healthExpect(t, "first heartbeat", e.recv(s), healthTestStart.Add(HealthHeartbeat), healthAllHealthy)
	e.clock.Step(HealthHeartbeat)
	healthExpect(t, "second heartbeat", e.recv(s), healthTestStart.Add(2*HealthHeartbeat), healthAllHealthy)
	if HealthHeartbeat*2 > HealthCheckTimeout {
		t.Errorf("heartbeat %v: two of them must fit in the health check timeout %v", HealthHeartbeat, HealthCheckTimeout)
	}
}

// TestHealthStreamEndsWhenNodeStops: the Node stopping ends its streams
// (the client sees an error, the gauge goes back to 0), and TableChanged
// after it is harmless.
func TestHealthStreamEndsWhenNodeStops(t *testing.T) {
	e := newHealthEnv(t)
	s := e.watch()
	healthExpect(t, "first message", e.recv(s), healthTestStart, healthAllHealthy)
	e.stop()
	if m, err := s.Recv(); err == nil {
		t.Fatalf("Recv after the Node stopped = %v, want an error", m)
	}
	e.waitFor("the stream is counted out", func() bool {
		return e.metric("featureplug_dra_health_streams", "", "") == 0
	})
	e.n.TableChanged()
}

// TestHealthStreamsBounded: streams beyond maxHealthStreams are refused
// with ResourceExhausted; the ones open keep working.
func TestHealthStreamsBounded(t *testing.T) {
	e := newHealthEnv(t)
	var open []grpc.ServerStreamingClient[drahealthv1.NodeWatchResourcesResponse]
	for range maxHealthStreams {
		s := e.watch()
		e.recv(s)
		open = append(open, s)
	}
	_, err := e.watch().Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream %d: Recv = %v, want ResourceExhausted", maxHealthStreams+1, err)
	}
	e.setTable([]Device{{Name: "gpu-0000", Unhealthy: "ecc-double-bit"}})
	for i, s := range open {
		healthExpect(t, fmt.Sprintf("stream %d after the change", i), e.recv(s), healthTestStart,
			[]string{"node-a/gpu-0000 UNHEALTHY ecc-double-bit"})
	}
}
