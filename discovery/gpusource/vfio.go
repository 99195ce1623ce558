package gpusource

import (
	"fmt"
	"os"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// FakeOption changes how OpenFake opens a fake node.
type FakeOption func(*Fake)

// WithFakeSysfsRoot makes a fake node with GPUs bound to vfio-pci lay out
// its sysfs tree (fakenode.Node.WriteSysfs) in dir, where tests and
// operators can look and change bindings, rather than in a temporary
// directory removed at Close.
func WithFakeSysfsRoot(dir string) FakeOption {
	return func(s *Fake) { s.sysfsDir = dir }
}

// SysfsRoot returns the root of the fake node's sysfs tree (the
// --sysfs-root its VFIO GPUs are read from), "" when it has none.
func (s *Fake) SysfsRoot() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sysfsDir
}

// SetVFIOState binds, unbinds or removes VFIO GPU i of the fake node in its
// sysfs tree (fakenode.Node.SetVFIOState): a fault for tests of device
// health. The next discovery sees it.
func (s *Fake) SetVFIOState(i int, state fakenode.VFIOState) error {
	return s.Node().SetVFIOState(i, state)
}

// layOutSysfs writes the sysfs tree of node, a new or changed fake node:
// in the directory given, or a temporary one when the node has GPUs bound
// to vfio-pci. s.mu is held or s is not shared yet.
func (s *Fake) layOutSysfs(node *fakenode.Node) error {
	if s.sysfsDir == "" {
		if node.VFIOCount() == 0 {
			return nil
		}
		tmp, err := os.MkdirTemp("", "featureplug-fake-sysfs-")
		if err != nil {
			return fmt.Errorf("fake sysfs: %w", err)
		}
		s.sysfsDir, s.removeSysfs = tmp, true
	}
	return node.WriteSysfs(s.sysfsDir)
}

// closeSysfs removes a temporary sysfs tree. s.mu is held.
func (s *Fake) closeSysfs() {
	if s.removeSysfs {
		_ = os.RemoveAll(s.sysfsDir)
	}
}
