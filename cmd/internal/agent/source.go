package agent

import (
	"bytes"
	"fmt"
	"os"
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
	// Fake returns the fake node currently behind the source, or nil for
	// real hardware.
	Fake() *fakenode.Node
	// Close releases NVML.
	Close()
}

// RealSource reads the real NVML library.
type RealSource struct {
	lib       nvml.Interface
	closeFn   func()
	sysfsRoot string
}

// OpenReal loads and initializes NVML as the options say.
func OpenReal(o discovery.NVMLOptions, sysfsRoot string) (*RealSource, error) {
	lib, closeFn, err := discovery.OpenNVML(o)
	if err != nil {
		return nil, err
	}
	return &RealSource{lib: lib, closeFn: closeFn, sysfsRoot: sysfsRoot}, nil
}

// Discover implements GPUSource.
func (s *RealSource) Discover() (*discovery.Inventory, nvml.Interface, error) {
	inv, err := discovery.Discover(s.lib, discovery.WithSysfsRoot(s.sysfsRoot))
	return inv, s.lib, err
}

// Fake implements GPUSource.
func (s *RealSource) Fake() *fakenode.Node { return nil }

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
}

// OpenFake opens a bundled fake node or a fake-node file.
func OpenFake(nameOrPath string) (*FakeSource, error) {
	s := &FakeSource{nameOrPath: nameOrPath}
	node, err := fakenode.Open(nameOrPath)
	if err != nil {
		return nil, err
	}
	if data, err := os.ReadFile(nameOrPath); err == nil {
		s.isFile, s.data = true, data
	}
	if err := initFake(node); err != nil {
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
		data, err := os.ReadFile(s.nameOrPath)
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
			_ = s.node.NVML().Shutdown()
			s.node, s.data = node, data
		}
	}
	lib := s.node.NVML()
	inv, err := discovery.Discover(lib)
	return inv, lib, err
}

// Fake implements GPUSource.
func (s *FakeSource) Fake() *fakenode.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// Close implements GPUSource.
func (s *FakeSource) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.node.NVML().Shutdown()
}
