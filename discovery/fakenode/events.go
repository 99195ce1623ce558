package fakenode

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// maxPendingEvents bounds the events a GPU keeps while no set listens for
// them; the oldest go first.
const maxPendingEvents = 256

// eventSet is an nvml.EventSet: a queue of events waiting for Wait.
type eventSet struct {
	unsupportedEventSet
	node *Node

	mu     sync.Mutex
	queue  []nvml.EventData
	freed  bool
	notify chan struct{} // signalled (non-blocking) when an event arrives
	done   chan struct{} // closed by Free

	onBlock func() // tests: called when a Wait finds no event and blocks
}

var _ nvml.EventSet = (*eventSet)(nil)

func newEventSet(n *Node) *eventSet {
	return &eventSet{node: n, notify: make(chan struct{}, 1), done: make(chan struct{})}
}

// Wait returns the next event, waiting up to timeoutms milliseconds for one
// (ERROR_TIMEOUT when none came). After Free it returns ERROR_UNINITIALIZED.
func (s *eventSet) Wait(timeoutms uint32) (nvml.EventData, nvml.Return) {
	var timer <-chan time.Time
	for {
		s.mu.Lock()
		if s.freed {
			s.mu.Unlock()
			return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
		}
		if ret := s.node.nvmlFail.get(); ret != nvml.SUCCESS {
			s.mu.Unlock()
			return nvml.EventData{}, ret
		}
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return ev, nvml.SUCCESS
		}
		s.mu.Unlock()
		if timeoutms == 0 {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		if timer == nil {
			t := time.NewTimer(time.Duration(timeoutms) * time.Millisecond)
			defer t.Stop()
			timer = t.C
		}
		if s.onBlock != nil {
			s.onBlock()
		}
		select {
		case <-s.notify:
		case <-s.done:
		case <-timer:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
}

// Free releases the set; a Wait in progress returns. Freeing twice is
// ERROR_UNINITIALIZED.
func (s *eventSet) Free() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return nvml.ERROR_UNINITIALIZED
	}
	s.freed = true
	s.queue = nil
	close(s.done)
	return nvml.SUCCESS
}

func (s *eventSet) isFreed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freed
}

// push queues an event; false when the set was freed.
func (s *eventSet) push(ev nvml.EventData) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return false
	}
	s.queue = append(s.queue, ev)
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return true
}

// InjectXID raises a critical XID error on GPU gpuIndex, naming no MIG
// device. Every event set registered for EventTypeXidCriticalError on that
// GPU receives it; when none is, the first set to register for it later
// does (see deliver).
func (n *Node) InjectXID(gpuIndex int, xid uint64) error {
	g, err := n.gpuAt(gpuIndex)
	if err != nil {
		return err
	}
	return n.deliver(g, nvml.EventTypeXidCriticalError, xid, noInstance, noInstance)
}

// InjectMIGXID raises a critical XID error on the MIG device of compute
// instance computeInstanceID in GPU instance gpuInstanceID of GPU gpuIndex.
// The event comes from the parent GPU's handle with the instance IDs set,
// as NVML reports it.
func (n *Node) InjectMIGXID(gpuIndex, gpuInstanceID, computeInstanceID int, xid uint64) error {
	g, err := n.gpuAt(gpuIndex)
	if err != nil {
		return err
	}
	if !n.hasComputeInstance(g, gpuInstanceID, computeInstanceID) {
		return fmt.Errorf("fake node %s: GPU %d has no MIG device with GPU instance %d and compute instance %d",
			n.Name(), gpuIndex, gpuInstanceID, computeInstanceID)
	}
	return n.deliver(g, nvml.EventTypeXidCriticalError, xid, uint32(gpuInstanceID), uint32(computeInstanceID))
}

// InjectECCDoubleBit raises an uncorrectable (double-bit) ECC error on GPU
// gpuIndex.
func (n *Node) InjectECCDoubleBit(gpuIndex int) error {
	g, err := n.gpuAt(gpuIndex)
	if err != nil {
		return err
	}
	return n.deliver(g, nvml.EventTypeDoubleBitEccError, 0, noInstance, noInstance)
}

func (n *Node) hasComputeInstance(g *gpu, giID, ciID int) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, ci := range g.computeInstancesLocked() {
		if int(ci.gi.id) == giID && int(ci.id) == ciID {
			return true
		}
	}
	return false
}

// deliver queues an event on every set registered for its type on g,
// forgetting sets that were freed. An event no set receives is kept for the
// first set that registers for its type on g: on real hardware it would be
// lost, but a test can then inject right after starting a watcher without
// waiting for the watcher to register.
func (n *Node) deliver(g *gpu, eventType, data uint64, gi, ci uint32) error {
	ev := nvml.EventData{Device: g.handle, EventType: eventType, EventData: data, GpuInstanceId: gi, ComputeInstanceId: ci}
	n.mu.Lock()
	defer n.mu.Unlock()
	delivered := false
	for s, mask := range g.events {
		if mask&eventType == 0 {
			continue
		}
		if !s.push(ev) {
			delete(g.events, s)
			continue
		}
		delivered = true
	}
	if !delivered {
		if len(g.pending) == maxPendingEvents {
			g.pending = slices.Delete(g.pending, 0, 1)
		}
		g.pending = append(g.pending, ev)
	}
	return nil
}

// registerLocked adds types to what set receives from g and hands it the
// pending events of those types. The caller holds node.mu.
func (g *gpu) registerLocked(set *eventSet, types uint64) {
	g.events[set] |= types
	kept := g.pending[:0]
	for _, ev := range g.pending {
		if ev.EventType&types == 0 || !set.push(ev) {
			kept = append(kept, ev)
		}
	}
	clear(g.pending[len(kept):])
	g.pending = kept
}
