// Package gpusource opens what the agent discovers GPUs from: the node's
// NVML library (Real) or a fake node (Fake), whose file is re-read at
// every discovery so that editing it behaves like re-partitioning real
// GPUs. A fake node also plays NVML events on request (fakenode's fault
// hooks).
package gpusource

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

var (
	_ fakenode.Injector = (*Fake)(nil)
)

// Real reads the real NVML library.
type Real struct {
	lib       nvml.Interface
	closeFn   func()
	sysfsRoot string
}

// OpenReal loads and initializes NVML as the options say. A node whose
// GPUs are all bound to vfio-pci needs no driver: without NVML it reads
// them from sysfs alone (discovery.CheckVFIOOnly).
func OpenReal(o discovery.NVMLOptions, sysfsRoot string) (*Real, error) {
	lib, closeFn, err := discovery.OpenNVML(o)
	if err != nil {
		if err := discovery.CheckVFIOOnly(sysfsRoot, err); err != nil {
			return nil, err
		}
		return &Real{closeFn: func() {}, sysfsRoot: sysfsRoot}, nil
	}
	return &Real{lib: lib, closeFn: closeFn, sysfsRoot: sysfsRoot}, nil
}

// Discover reads the GPUs NVML sees, and those bound to vfio-pci from
// sysfs, and returns the NVML the health watcher listens to (nil without
// NVML).
func (s *Real) Discover() (*discovery.Inventory, nvml.Interface, error) {
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

// Close releases NVML.
func (s *Real) Close() { s.closeFn() }

// SysfsRoot returns the root under which sysfs and /dev are read.
func (s *Real) SysfsRoot() string { return s.sysfsRoot }

// NVML returns the library (for NVIDIA's CDI generator).
func (s *Real) NVML() nvml.Interface { return s.lib }

// Fake reads a fake node. A node given by path is re-read on every
// Discover, so editing the file (e.g. a new MIG layout) behaves like
// re-partitioning real GPUs; an unchanged file keeps the same node.
type Fake struct {
	nameOrPath string
	isFile     bool

	mu   sync.Mutex
	node *fakenode.Node
	data []byte
	// sysfsDir holds the node's sysfs tree when it has GPUs bound to
	// vfio-pci (vfio.go); removeSysfs when it is temporary.
	sysfsDir    string
	removeSysfs bool
	// migState is the file the fake node keeps its MIG state in, "" for
	// none (WithFakeMIGState).
	migState string
}

// OpenFake opens a bundled fake node or a fake-node file.
func OpenFake(nameOrPath string, opts ...FakeOption) (*Fake, error) {
	s := &Fake{nameOrPath: nameOrPath}
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
	if err := s.keepMIGState(node); err != nil {
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

// Discover reads the fake node's GPUs, and returns its NVML: the same
// value until the file changes. A fake-node file that changed but no
// longer parses is an error; the previous node stays in place.
func (s *Fake) Discover() (*discovery.Inventory, nvml.Interface, error) {
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
			if err := s.keepMIGState(node); err != nil {
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
func (s *Fake) Name() string { return s.Node().Name() }

// Node returns the fake node behind the source now.
func (s *Fake) Node() *fakenode.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// InjectXID implements fakenode.Injector.
func (s *Fake) InjectXID(gpu int, xid uint64) error {
	return s.Node().InjectXID(gpu, xid)
}

// InjectMIGXID implements fakenode.Injector.
func (s *Fake) InjectMIGXID(gpu, gi, ci int, xid uint64) error {
	return s.Node().InjectMIGXID(gpu, gi, ci, xid)
}

// InjectECCDoubleBit implements fakenode.Injector.
func (s *Fake) InjectECCDoubleBit(gpu int) error {
	return s.Node().InjectECCDoubleBit(gpu)
}

// ResetGPU implements fakenode.Injector.
func (s *Fake) ResetGPU(gpu int) error { return s.Node().ResetGPU(gpu) }

// SetRecoveryAction implements fakenode.Injector.
func (s *Fake) SetRecoveryAction(gpu int, action nvml.DeviceGpuRecoveryAction) error {
	return s.Node().SetRecoveryAction(gpu, action)
}

// SetHealth implements fakenode.Injector.
func (s *Fake) SetHealth(gpu int, h fakenode.HealthSpec) error { return s.Node().SetHealth(gpu, h) }

// SetNVMLFailure implements fakenode.Injector.
func (s *Fake) SetNVMLFailure(ret nvml.Return) { s.Node().SetNVMLFailure(ret) }

// FaultHandler serves the fault hooks of the fake node (POST /fake/xid,
// /fake/ecc, /fake/reset, /fake/recovery-action, /fake/health,
// /fake/nvml): the agent serves it only for a fake node.
func (s *Fake) FaultHandler() http.Handler { return fakenode.FaultHandler(s) }

// Close shuts the fake node's NVML down.
func (s *Fake) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.node.NVML().Shutdown()
	s.closeSysfs()
}
