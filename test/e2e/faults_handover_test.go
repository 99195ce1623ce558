package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/featureplug/featureplug/test/harness"
)

// handoverSampler polls the kubelet device manager's view of one resource
// as fast as it can and records the longest stretch in which the resource
// had fewer allocatable devices than want: a moment without a registered,
// listening endpoint (the device manager marks every device of a resource
// unhealthy when its last endpoint goes).
type handoverSampler struct {
	peer     *harness.KubeletPeer
	resource string
	want     int64

	mu      sync.Mutex
	samples int
	bad     int
	longest time.Duration
	// since is when the current stretch of bad samples began (zero: none).
	since time.Time
	stop  chan struct{}
	done  chan struct{}
}

// startHandoverSampler starts sampling until stop.
func startHandoverSampler(peer *harness.KubeletPeer, resource string, want int64) *handoverSampler {
	s := &handoverSampler{peer: peer, resource: resource, want: want, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				s.sample() // a gap open at the end is counted to here
				return
			default:
			}
			s.sample()
			time.Sleep(200 * time.Microsecond)
		}
	}()
	return s
}

// sample takes one sample.
func (s *handoverSampler) sample() {
	_, allocatable := s.peer.Capacity(s.resource)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if allocatable < s.want {
		s.bad++
		if s.since.IsZero() {
			s.since = now
		}
	}
	if !s.since.IsZero() {
		s.longest = max(s.longest, now.Sub(s.since))
		if allocatable >= s.want {
			s.since = time.Time{}
		}
	}
}

// finish stops sampling and returns the samples taken, how many saw fewer
// devices than wanted, and the longest such stretch.
func (s *handoverSampler) finish() (samples, bad int, longest time.Duration) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.bad, s.longest
}

// TestFault26HandoverBetweenTwoAgents: a DaemonSet rolling update with
// maxSurge runs a second agent beside the first on one node. Both serve
// the same resource to the kubelet's own device manager (KubeletPeer) over
// one device-plugin directory: the second, started 1 s after the first,
// takes a socket of its own and registers at once, ready without waiting
// for a re-discovery; the first keeps serving, untouched. Then the first
// is stopped (SIGTERM, as the rolling update does once the second is
// ready): it removes only its own socket, and the device manager never
// sees the resource without a registered, listening endpoint: every sample
// of its allocatable count, taken throughout, is the node's 8 GPUs, and a
// pod still gets a GPU through the second agent.
func TestFault26HandoverBetweenTwoAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	dir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, dir)
	rules := rulesFaultWrite(t, t.TempDir(), "rules.yaml", rulesFaultGPU)
	spec := agentSpec{Node: "fault25", FakeNode: "dgx-h100", Rules: rules, KubeletDir: dir}
	first := startAgent(t, spec)
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 8})
	first.waitMetric(t, "featureplug_ready", func(v float64) bool { return v == 1 })

	sampler := startHandoverSampler(peer, "nvidia.com/gpu", 8)
	time.Sleep(time.Second)
	second := startAgent(t, spec) // its own state directory and metrics port
	second.waitMetric(t, "featureplug_ready", func(v float64) bool { return v == 1 })
	slot0 := filepath.Join(dir, "featureplug-nvidia.com_gpu.sock")
	slot1 := filepath.Join(dir, "featureplug-nvidia.com_gpu@1.sock")
	rulesFaultWaitLog(t, second, "registered with the kubelet", "endpoint=featureplug-nvidia.com_gpu@1.sock")
	for _, a := range []*agent{first, second} {
		if code, body, err := a.get("/readyz"); err != nil || code != http.StatusOK {
			t.Errorf("/readyz of the %s agent with both running: %d %s %v", a.spec.Node, code, body, err)
		}
	}
	if n := pluginFaultCount(pluginFaultLogSince(t, first, 0), "device-plugin socket missing"); n != 0 {
		t.Errorf("the first agent lost its socket %d times when the second started", n)
	}

	if err := first.Stop(); err != nil {
		t.Fatalf("stopping the first agent: %v", err)
	}
	time.Sleep(2 * time.Second) // the device manager's view after the first is gone
	samples, bad, longest := sampler.finish()
	t.Logf("handover: %d samples of the device manager's allocatable nvidia.com/gpu, %d below 8, longest gap %v", samples, bad, longest)
	if bad > 0 {
		t.Errorf("the device manager saw nvidia.com/gpu below 8 allocatable in %d of %d samples (longest gap %v); want none", bad, samples, longest)
	}
	if _, err := os.Lstat(slot0); !os.IsNotExist(err) {
		t.Errorf("the stopped agent left its socket %s (%v)", slot0, err)
	}
	if _, err := os.Lstat(slot1); err != nil {
		t.Errorf("the second agent's socket: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := peer.Allocate(ctx, "after-handover", "c", "nvidia.com/gpu", 1); err != nil {
		t.Errorf("allocating a GPU through the second agent after the handover: %v", err)
	}
	if code, body, err := second.get("/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz of the second agent after the handover: %d %s %v", code, body, err)
	}
}
