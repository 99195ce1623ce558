package gpusource

import (
	"fmt"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// WithFakeMIGState makes the fake node keep its GPUs' MIG state in the
// file at path (fakenode.Node.KeepMIGState), as the NVIDIA kernel driver
// keeps it across the processes that call NVML: an agent killed and
// started again finds the MIG devices it created.
func WithFakeMIGState(path string) FakeOption {
	return func(s *Fake) { s.migState = path }
}

// keepMIGState makes node, a new or changed fake node, keep its MIG state
// where WithFakeMIGState said.
func (s *Fake) keepMIGState(node *fakenode.Node) error {
	if s.migState == "" {
		return nil
	}
	if err := node.KeepMIGState(s.migState); err != nil {
		return fmt.Errorf("fake node MIG state: %w", err)
	}
	return nil
}
