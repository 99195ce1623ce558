package agent

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// GPUSource is where the agent reads GPUs from: the real NVML library or a
// fake node.
type GPUSource interface {
	// Discover reads the node's GPUs. It also returns the NVML the health
	// watcher should listen to: the same value until the hardware behind it
	// is replaced (a fake node whose file changed).
	Discover() (*discovery.Inventory, nvml.Interface, error)
	// Close releases NVML.
	Close()
}

// EventInjector is implemented by sources that can play NVML events (a
// fake node), for tests and benchmarks; the agent serves /fake/xid,
// /fake/ecc and /fake/stall only for such a source. Real hardware does
// not implement it.
type EventInjector interface {
	// InjectXID plays an XID error on the GPU with the given index.
	InjectXID(gpu int, xid uint64) error
	// InjectMIGXID plays an XID error on one MIG device of a GPU.
	InjectMIGXID(gpu, gi, ci int, xid uint64) error
	// InjectECCDoubleBit plays a double-bit ECC error on a GPU.
	InjectECCDoubleBit(gpu int) error
}

var (
	_ GPUSource     = (*RealSource)(nil)
	_ GPUSource     = (*FakeSource)(nil)
	_ EventInjector = (*FakeSource)(nil)
)

// RealSource reads the real NVML library.
type RealSource struct {
	lib       nvml.Interface
	closeFn   func()
	sysfsRoot string
}

// OpenReal loads and initializes NVML as the options say. A node whose
// GPUs are all bound to vfio-pci needs no driver: without NVML it reads
// them from sysfs alone (discovery.CheckVFIOOnly).
func OpenReal(o discovery.NVMLOptions, sysfsRoot string) (*RealSource, error) {
	lib, closeFn, err := discovery.OpenNVML(o)
	if err != nil {
		if err := discovery.CheckVFIOOnly(sysfsRoot, err); err != nil {
			return nil, err
		}
		return &RealSource{closeFn: func() {}, sysfsRoot: sysfsRoot}, nil
	}
	return &RealSource{lib: lib, closeFn: closeFn, sysfsRoot: sysfsRoot}, nil
}

// Discover implements GPUSource: the GPUs NVML sees, and those bound to
// vfio-pci from sysfs. Without NVML the returned NVML is nil.
func (s *RealSource) Discover() (*discovery.Inventory, nvml.Interface, error) {
	inv := &discovery.Inventory{}
	if s.lib != nil {
		var err error
		if inv, err = discovery.Discover(s.lib, discovery.WithSysfsRoot(s.sysfsRoot)); err != nil {
			return nil, s.lib, err
		}
	}
	vfio, err := discovery.DiscoverVFIO(s.sysfsRoot)
	if err != nil {
		return nil, s.lib, err
	}
	inv.VFIO = vfio
	return inv, s.lib, nil
}

// Close implements GPUSource.
func (s *RealSource) Close() { s.closeFn() }

// FakeSource reads a fake node. A node given by path is re-read on every
// Discover, so editing the file (e.g. a new MIG layout) behaves like
// re-partitioning real GPUs; an unchanged file keeps the same node.
type FakeSource struct {
	nameOrPath string
	isFile     bool

	mu   sync.Mutex
	node *fakenode.Node
	data []byte
	// sysfsDir holds the node's sysfs tree when it has GPUs bound to
	// vfio-pci (source_vfio.go); removeSysfs when it is temporary.
	sysfsDir    string
	removeSysfs bool
}

// OpenFake opens a bundled fake node or a fake-node file.
func OpenFake(nameOrPath string, opts ...FakeOption) (*FakeSource, error) {
	s := &FakeSource{nameOrPath: nameOrPath}
	for _, o := range opts {
		o(s)
	}
	node, err := fakenode.Open(nameOrPath)
	if err != nil {
		return nil, err
	}
	if data, err := fakenode.ReadFile(nameOrPath); err == nil {
		s.isFile, s.data = true, data
	}
	if err := initFake(node); err != nil {
		return nil, err
	}
	if err := s.layOutSysfs(node); err != nil {
		return nil, err
	}
	s.node = node
	return s, nil
}

func initFake(node *fakenode.Node) error {
	if ret := node.NVML().Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("initializing fake node %s: %s", node.Name(), ret.Error())
	}
	return nil
}

// Discover implements GPUSource. A fake-node file that changed but no
// longer parses is an error; the previous node stays in place.
func (s *FakeSource) Discover() (*discovery.Inventory, nvml.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isFile {
		data, err := fakenode.ReadFile(s.nameOrPath)
		if err != nil {
			return nil, nil, fmt.Errorf("re-reading fake node: %w", err)
		}
		if !bytes.Equal(data, s.data) {
			node, err := fakenode.Parse(s.nameOrPath, data)
			if err != nil {
				return nil, nil, err
			}
			if err := initFake(node); err != nil {
				return nil, nil, err
			}
			if err := s.layOutSysfs(node); err != nil {
				return nil, nil, err
			}
			_ = s.node.NVML().Shutdown()
			s.node, s.data = node, data
		}
	}
	lib := s.node.NVML()
	inv, err := discovery.Discover(lib)
	if err != nil || s.sysfsDir == "" {
		return inv, lib, err
	}
	if inv.VFIO, err = discovery.DiscoverVFIO(s.sysfsDir); err != nil {
		return nil, lib, err
	}
	return inv, lib, nil
}

// Name returns the name of the fake node currently behind the source.
func (s *FakeSource) Name() string { return s.current().Name() }

func (s *FakeSource) current() *fakenode.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// InjectXID implements EventInjector.
func (s *FakeSource) InjectXID(gpu int, xid uint64) error {
	return s.current().InjectXID(gpu, xid)
}

// InjectMIGXID implements EventInjector.
func (s *FakeSource) InjectMIGXID(gpu, gi, ci int, xid uint64) error {
	return s.current().InjectMIGXID(gpu, gi, ci, xid)
}

// InjectECCDoubleBit implements EventInjector.
func (s *FakeSource) InjectECCDoubleBit(gpu int) error {
	return s.current().InjectECCDoubleBit(gpu)
}

// Close implements GPUSource.
func (s *FakeSource) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.node.NVML().Shutdown()
	s.closeSysfs()
}
