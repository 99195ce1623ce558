package fakenode

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// bundled holds the named nodes shipped with the binary.
//
//go:embed nodes/*.yaml
var bundled embed.FS

// bundledDir is the folder of the bundled nodes inside the embedded FS.
const bundledDir = "nodes"

// Node is a fake GPU node built from a YAML description. Its NVML() is an
// nvml.Interface that answers as the described hardware would; its Inject
// methods raise health events through the NVML event API.
type Node struct {
	spec Spec
	// path is the file the node was loaded from; empty for bundled nodes
	// and Parse.
	path string
	// bundledName is the name of a bundled node; empty otherwise.
	bundledName string
	lib         *library
	gpus        []*gpu
	// nvmlFail makes every NVML call fail (SetNVMLFailure, nvmlfail.go).
	nvmlFail nvmlFailure

	// mu guards the mutable state below and in gpus: MIG mode, GPU and
	// compute instances, event registrations, compute modes.
	mu sync.RWMutex
	// computeModeDenied makes SetComputeMode answer NO_PERMISSION
	// (computemode.go).
	computeModeDenied bool

	// vfio are the GPUs bound to vfio-pci, with their states and the
	// sysfs trees written for them (vfio.go); the states and trees are
	// guarded by mu.
	vfio       []vfioLayout
	vfioStates []VFIOState
	sysfsDirs  []string

	// running is set once the file's MIG devices are made: MIG devices
	// created after that get UUIDs of their own (mig_create.go).
	running bool
	// digest identifies the node file's content; migStatePath is the
	// file the MIG state is kept in, "" for none (mig_state.go).
	digest       string
	migStatePath string
}

// MaxFileSize is the largest fake node file Load, ReadFile and Parse
// accept: 256 KiB, over 200 times the largest bundled node and about 15
// times a node of MaxGPUs GPUs with every MIG device, placement and health
// field written out. A larger file is a mistake (a wrong path, a log), and
// decoding it would cost seconds and gigabytes of memory.
const MaxFileSize = 256 << 10

// Parse builds a node from YAML. source names the data in errors (usually
// the file name).
func Parse(source string, data []byte) (*Node, error) {
	if len(data) > MaxFileSize {
		return nil, sizeError(source, int64(len(data)))
	}
	spec, err := decodeSpec(source, data)
	if err != nil {
		return nil, err
	}
	l, err := validate(source, spec, newCatalog())
	if err != nil {
		return nil, err
	}
	n, err := build(spec, l)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	n.digest = digestOf(data)
	return n, nil
}

// Load builds a node from a YAML file. Loading the same file again gives a
// node with the same UUIDs and bus IDs, so an agent that sees the file
// change can simply Load it again.
func Load(path string) (*Node, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	n, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	n.path = path
	return n, nil
}

// ReadFile reads a fake node file, refusing one larger than MaxFileSize
// without reading more of it than the cap.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading fake node file: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only: a close error loses nothing
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxFileSize {
		return nil, sizeError(path, fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading fake node file %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, sizeError(path, -1) // grew, or not a regular file
	}
	return data, nil
}

// sizeError says that a fake node file is over MaxFileSize; size is -1
// when only "more" is known.
func sizeError(source string, size int64) error {
	have := fmt.Sprintf("over %d bytes", MaxFileSize)
	if size >= 0 {
		have = fmt.Sprintf("%d bytes", size)
	}
	return &SpecError{Source: source, Problem: fmt.Sprintf("the file is %s, over the cap of %d bytes (fakenode.MaxFileSize) for a fake node file", have, MaxFileSize)}
}

// Named builds one of the bundled nodes (see BundledNames).
func Named(name string) (*Node, error) {
	file := path.Join(bundledDir, name+".yaml")
	data, err := bundled.ReadFile(file)
	if err != nil || name == "" || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("%q is not a bundled fake node (have %s)", name, strings.Join(BundledNames(), ", "))
	}
	n, err := Parse(file, data)
	if err != nil {
		return nil, err
	}
	n.bundledName = name
	return n, nil
}

// Open builds the bundled node named nameOrPath if there is one, else loads
// nameOrPath as a file.
func Open(nameOrPath string) (*Node, error) {
	if slices.Contains(BundledNames(), nameOrPath) {
		return Named(nameOrPath)
	}
	n, err := Load(nameOrPath)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("fake node %q is neither a bundled node (%s) nor a file: %w", nameOrPath, strings.Join(BundledNames(), ", "), err)
	}
	return n, err
}

// BundledNames lists the bundled nodes, sorted.
func BundledNames() []string {
	entries, err := bundled.ReadDir(bundledDir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Name returns the node name from the YAML.
func (n *Node) Name() string { return n.spec.Name }

// Path returns the file the node was loaded from, or "" for a bundled node
// or one built by Parse. An agent can watch it and Load it again on change.
func (n *Node) Path() string { return n.path }

// Reload builds the node again from where it came from (the file or the
// bundled node), returning a fresh node with the file's current content.
func (n *Node) Reload() (*Node, error) {
	switch {
	case n.path != "":
		return Load(n.path)
	case n.bundledName != "":
		return Named(n.bundledName)
	}
	return nil, errors.New("fake node " + n.Name() + " was parsed from memory and cannot be reloaded")
}

// Spec returns the description the node was built from.
func (n *Node) Spec() Spec { return n.spec }

// NVML returns the node's NVML. It is safe for concurrent use and always
// the same value for one node.
func (n *Node) NVML() nvml.Interface { return n.lib }

// gpu is one physical GPU of a node.
type gpu struct {
	node    *Node
	index   int
	product *product
	uuid    string
	addr    pciAddress
	numa    int // -1: not reported
	handle  *gpuHandle
	// lanes are the GPU's NVLink lanes, len(lanes) == product.nvlinkLanes.
	lanes []lane
	// topology is the common PCIe ancestor with every other GPU, by index.
	topology []nvml.GpuTopologyLevel
	// health is the failure evidence NVML reports for the GPU; guarded by
	// node.mu, as faults.go changes it at run time.
	health HealthSpec
	// extra is the GPU's PCI class and fabric (mode.go).
	extra gpuExtra

	// Guarded by node.mu:
	migEnabled bool
	gis        []*gpuInstance // sorted by ID
	events     map[*eventSet]uint64
	// pending are events injected while no set was registered for them.
	pending []nvml.EventData
	// computeMode is the mode SetComputeMode recorded (computemode.go).
	computeMode nvml.ComputeMode
	// faults are the faults played at run time (faults.go); the run-time
	// changes of health are guarded too.
	faults gpuFaults
	// migCtl is the pending MIG mode and what blocks changing it
	// (mig_create.go).
	migCtl migControl
}

// lane is one NVLink lane of a GPU.
type lane struct {
	enabled    bool
	remote     nvml.PciInfo
	remoteType nvml.IntNvLinkDeviceType
}

// build creates the node's devices from a spec and its validated layout.
func build(spec *Spec, l *layout) (*Node, error) {
	n := &Node{spec: *spec, vfio: l.vfio, vfioStates: make([]VFIOState, len(l.vfio))}
	n.lib = newLibrary(n, l)
	for i, gl := range l.gpus {
		g := &gpu{
			node: n, index: i, product: gl.product, uuid: gpuUUID(l.name, i),
			addr: gpuAddress(i), numa: gl.numa, migEnabled: gl.migEnabled, migCtl: migControl{pending: gl.migEnabled},
			health: gl.health, extra: gl.extra, events: map[*eventSet]uint64{},
		}
		g.handle = newGPUHandle(g)
		n.gpus = append(n.gpus, g)
	}
	for i, gl := range l.gpus {
		g := n.gpus[i]
		for _, gil := range gl.gis {
			gi, ret := g.createGPUInstance(gil.profile, gil.start)
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("GPU %d: creating %s at memory slice %d: %s", i, gil.profile.name, gil.start, ret.Error())
			}
			for _, c := range gil.cis {
				if _, ret := gi.createComputeInstance(c); ret != nvml.SUCCESS {
					return nil, fmt.Errorf("GPU %d: creating a %d-slice compute instance in %s: %s", i, c, gil.profile.name, ret.Error())
				}
			}
		}
	}
	wireNVLink(n.gpus, l.nvlink)
	wirePCIe(n.gpus, l.pcie)
	n.mu.Lock()
	n.running = true
	n.mu.Unlock()
	return n, nil
}

// gpuAt returns the GPU with the given index.
func (n *Node) gpuAt(index int) (*gpu, error) {
	if index < 0 || index >= len(n.gpus) {
		return nil, fmt.Errorf("fake node %s has no GPU %d (it has %d)", n.Name(), index, len(n.gpus))
	}
	return n.gpus[index], nil
}

// gpuOf resolves a device handle passed to NVML (ours, or one wrapped by
// go-nvlib) to a GPU of this node.
func (n *Node) gpuOf(d nvml.Device) (*gpu, bool) {
	if d == nil {
		return nil, false
	}
	if h, ok := d.(*gpuHandle); ok && h.gpu.node == n {
		return h.gpu, true
	}
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, false
	}
	for _, g := range n.gpus {
		if g.uuid == uuid {
			return g, true
		}
	}
	return nil, false
}
