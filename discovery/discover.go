package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const mib = 1024 * 1024

// Option changes how Discover reads a node.
type Option func(*reader)

// WithSysfsRoot sets the root under which Discover looks up a GPU's NUMA
// node in sysfs when NVML cannot tell (older drivers). The default is "/";
// containerized agents that mount the host's /sys elsewhere set it.
func WithSysfsRoot(root string) Option {
	return func(r *reader) { r.sysfsRoot = root }
}

// Discover reads the node's GPUs, their MIG devices and their links through
// lib, which must already be initialized. It calls NVML only here, once per
// discovery; everything downstream works from the returned Inventory.
//
// A fact NVML does not support on a device is recorded as Unknown (or
// NoNUMANode); any other NVML error is returned, wrapped with what was being
// read and on which device.
func Discover(lib nvml.Interface, opts ...Option) (*Inventory, error) {
	r := &reader{lib: lib, devlib: device.New(lib), sysfsRoot: "/"}
	for _, o := range opts {
		o(r)
	}
	return r.inventory()
}

type reader struct {
	lib       nvml.Interface
	devlib    device.Interface
	sysfsRoot string
	sysfs     fs.ReadLinkFS // WithSysfs (pcie.go)
	// addressing is whether the platform has addressing modes
	// (addressing.go).
	addressing addressingSupport
	syms       symbols // newer NVML functions the library has (mode.go)
}

// readError is an NVML failure while reading one fact of one device.
type readError struct {
	what   string
	device string
	ret    nvml.Return
}

func (e *readError) Error() string {
	where := e.what
	if e.device != "" {
		where += " of " + e.device
	}
	if hint := returnHint(e.ret); hint != "" {
		return fmt.Sprintf("reading %s: %s (%s)", where, hint, e.ret.Error())
	}
	return fmt.Sprintf("reading %s: %s", where, e.ret.Error())
}

// returnHint turns the NVML failures an operator can fix into one sentence
// that says how; "" for the others.
func returnHint(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_NO_PERMISSION:
		return "NVML denied access; featureplug needs read-write access to /dev/nvidiactl and /dev/nvidia* (run it as root or privileged)"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "the NVML library does not match the loaded NVIDIA kernel driver; after a driver upgrade reload the nvidia kernel modules (or reboot), and mount the host's libnvidia-ml.so.1 rather than a copy of another version"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "the NVML library is older than this function; use the driver's own libnvidia-ml.so.1"
	}
	return ""
}

// lost reports whether NVML says the GPU fell off the bus or otherwise
// became inaccessible.
func lost(ret nvml.Return) bool { return ret == nvml.ERROR_GPU_IS_LOST }

func (e *readError) Unwrap() error { return e.ret }

// check turns an NVML return code into an error naming what was read.
func check(ret nvml.Return, what, dev string) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return &readError{what: what, device: dev, ret: ret}
}

// optional reports whether ret means "this device does not support that":
// the fact is then recorded as unknown. Other failures are errors.
func optional(ret nvml.Return, what, dev string) (ok bool, err error) {
	switch ret {
	case nvml.SUCCESS:
		return true, nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_FOUND, nvml.ERROR_FUNCTION_NOT_FOUND:
		return false, nil
	default:
		return false, check(ret, what, dev)
	}
}

func (r *reader) inventory() (*Inventory, error) {
	inv := &Inventory{}
	var ret nvml.Return
	if inv.DriverVersion, ret = r.lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return nil, check(ret, "driver version", "")
	}
	if inv.NVMLVersion, ret = r.lib.SystemGetNVMLVersion(); ret != nvml.SUCCESS {
		return nil, check(ret, "NVML version", "")
	}
	cuda, ret := r.lib.SystemGetCudaDriverVersion()
	if ok, err := optional(ret, "CUDA driver version", ""); err != nil {
		return nil, err
	} else if ok {
		inv.CUDADriverVersion = fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10)
	} else {
		inv.CUDADriverVersion = Unknown
	}

	r.lookupSymbols()
	count, ret := r.lib.DeviceGetCount()
	if err := check(ret, "device count", ""); err != nil {
		return nil, err
	}
	handles := make([]nvml.Device, 0, count)
	inv.GPUs = make([]GPU, 0, count)
	for i := range count {
		name := "GPU " + strconv.Itoa(i)
		h, ret := r.lib.DeviceGetHandleByIndex(i)
		if lost(ret) {
			inv.LostGPUs = append(inv.LostGPUs, i)
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, check(ret, "device handle", name)
		}
		var g GPU
		if err := r.gpu(h, i, &g); err != nil {
			var re *readError
			if !errors.As(err, &re) || !lost(re.ret) {
				return nil, err
			}
			if g.UUID == "" {
				// Lost before it could be named: it cannot be advertised.
				inv.LostGPUs = append(inv.LostGPUs, i)
				continue
			}
			g.Lost = true
		}
		handles = append(handles, h)
		inv.GPUs = append(inv.GPUs, g)
	}
	links, err := r.links(handles, inv.GPUs, count)
	if err != nil {
		return nil, err
	}
	inv.Links = links
	return inv, nil
}

func (r *reader) gpu(h nvml.Device, index int, g *GPU) error {
	dev := "GPU " + strconv.Itoa(index)
	g.Index = index
	// What a GPU lost midway keeps for the facts not read yet.
	g.Minor, g.NUMANode, g.ComputeMode, g.Brand, g.Architecture, g.Mode = -1, NoNUMANode, Unknown, Unknown, Unknown, Unknown
	var ret nvml.Return

	if g.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return check(ret, "UUID", dev)
	}
	if g.Product, ret = h.GetName(); ret != nvml.SUCCESS {
		return check(ret, "product name", dev)
	}
	minor, ret := h.GetMinorNumber()
	if ok, err := optional(ret, "minor number", dev); err != nil {
		return err
	} else if ok {
		g.Minor = minor
	} else {
		g.Minor = -1
	}

	nd, err := r.devlib.NewDevice(h)
	if err != nil {
		return fmt.Errorf("reading %s: %w", dev, err)
	}
	g.Brand = unknownOnError(nd.GetBrandAsString())
	g.Architecture = unknownOnError(nd.GetArchitectureAsString())
	g.AddressingMode = r.addressingMode(h) // addressing.go

	major, minorCC, ret := h.GetCudaComputeCapability()
	if err := check(ret, "compute capability", dev); err != nil {
		return err
	}
	g.ComputeMajor, g.ComputeMinor = major, minorCC
	g.Family = familyOf(major, minorCC)

	mem, ret := h.GetMemoryInfo()
	if err := check(ret, "memory", dev); err != nil {
		return err
	}
	g.MemoryMiB = mem.Total / mib

	g.Mode = Unknown
	if g.PCIBusID, g.Mode, err = r.pciInfo(h, dev); err != nil {
		return err
	}

	g.NUMANode = NoNUMANode
	numa, ret := h.GetNumaNodeId()
	if ok, err := optional(ret, "NUMA node", dev); err != nil {
		return err
	} else if ok {
		g.NUMANode = numa
	} else {
		g.NUMANode = r.sysfsNUMANode(g.PCIBusID)
	}
	g.PCIeRoot = r.pcieRoot(g.PCIBusID)

	g.ComputeMode = Unknown
	mode, ret := h.GetComputeMode()
	if ok, err := optional(ret, "compute mode", dev); err != nil {
		return err
	} else if ok {
		g.ComputeMode = computeModeName(mode)
	}

	current, pending, ret := h.GetMigMode()
	if ok, err := optional(ret, "MIG mode", dev); err != nil {
		return err
	} else if ok {
		g.MIGCapable = true
		g.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
		g.MIGModePending = pending != current
	}
	if g.MIGEnabled {
		if g.MIGDevices, err = r.migDevices(h, g); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) migDevices(parent nvml.Device, g *GPU) ([]MIGDevice, error) {
	dev := "GPU " + strconv.Itoa(g.Index)
	slots, ret := parent.GetMaxMigDeviceCount()
	if err := check(ret, "maximum MIG device count", dev); err != nil {
		return nil, err
	}
	var out []MIGDevice
	seen := make(map[string]bool)
	for j := range slots {
		h, ret := parent.GetMigDeviceHandleByIndex(j)
		if vanished(ret) {
			continue // an empty slot
		}
		mdev := fmt.Sprintf("%s MIG device %d", dev, j)
		if err := check(ret, "handle", mdev); err != nil {
			return nil, err
		}
		m := MIGDevice{ParentIndex: g.Index, ParentUUID: g.UUID, Index: j}
		// A MIG device destroyed while it is read (dynamic MIG's Unprepare
		// runs beside discovery) answers INVALID_ARGUMENT or NOT_FOUND:
		// it is gone, and skipped. One created meanwhile shifts the
		// indexes, so a device may come twice: once is kept.
		if m.UUID, ret = h.GetUUID(); vanished(ret) || seen[m.UUID] {
			continue
		} else if ret != nvml.SUCCESS {
			return nil, check(ret, "UUID", mdev)
		}
		gi, ret := h.GetGpuInstanceId()
		if vanished(ret) {
			continue
		} else if err := check(ret, "GPU instance ID", mdev); err != nil {
			return nil, err
		}
		ci, ret := h.GetComputeInstanceId()
		if vanished(ret) {
			continue
		} else if err := check(ret, "compute instance ID", mdev); err != nil {
			return nil, err
		}
		m.GPUInstanceID, m.ComputeInstanceID = gi, ci
		attrs, ret := h.GetAttributes()
		if vanished(ret) {
			continue
		} else if err := check(ret, "attributes", mdev); err != nil {
			return nil, err
		}
		m.Multiprocessors = int(attrs.MultiprocessorCount)
		m.MemoryMiB = attrs.MemorySizeMB
		m.Engines = Engines{
			Copy:    int(attrs.SharedCopyEngineCount),
			Decoder: int(attrs.SharedDecoderCount),
			Encoder: int(attrs.SharedEncoderCount),
			JPEG:    int(attrs.SharedJpegCount),
			OFA:     int(attrs.SharedOfaCount),
		}
		if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			m.MemoryMiB = mem.Total / mib
		}
		md, err := r.devlib.NewMigDevice(h)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", mdev, err)
		}
		profile, err := md.GetProfile()
		if err != nil {
			if _, ret := h.GetUUID(); vanished(ret) {
				continue // destroyed while go-nvlib read it
			}
			return nil, fmt.Errorf("reading MIG profile of %s: %w", mdev, err)
		}
		info := profile.GetInfo()
		m.Profile = profile.String()
		m.GISlices, m.CISlices = info.G, info.C
		seen[m.UUID] = true
		out = append(out, m)
	}
	return out, nil
}

// vanished reports an answer about a MIG device handle that no longer
// exists (or a slot without one).
func vanished(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT
}

func pcieLevel(l nvml.GpuTopologyLevel) PCIeLevel {
	switch l {
	case nvml.TOPOLOGY_INTERNAL:
		return PCIeInternal
	case nvml.TOPOLOGY_SINGLE:
		return PCIeSingle
	case nvml.TOPOLOGY_MULTIPLE:
		return PCIeMultiple
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return PCIeHostBridge
	case nvml.TOPOLOGY_NODE:
		return PCIeNode
	case nvml.TOPOLOGY_SYSTEM:
		return PCIeSystem
	default:
		return PCIeUnknown
	}
}

func computeModeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return "Default"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "ExclusiveThread"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "Prohibited"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "ExclusiveProcess"
	default:
		return Unknown
	}
}

// familyOf names the architecture family from the compute capability, as
// gpu-feature-discovery does for its gpu.family label. It is the one
// family table of featureplug: labels and features both use GPU.Family.
func familyOf(major, minor int) string {
	switch {
	case major == 1:
		return "tesla"
	case major == 2:
		return "fermi"
	case major == 3:
		return "kepler"
	case major == 5:
		return "maxwell"
	case major == 6:
		return "pascal"
	case major == 7 && minor < 5:
		return "volta"
	case major == 7:
		return "turing"
	case major == 8 && minor == 9:
		return "ada-lovelace"
	case major == 8:
		return "ampere"
	case major == 9:
		return "hopper"
	case major == 10 || major == 12:
		return "blackwell"
	case major == 13:
		return "rubin"
	default:
		return "undefined"
	}
}

// busIDString converts NVML's NUL-terminated C char array to a string.
func busIDString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// normalizeBusID turns NVML's "00000000:07:00.0" into the lowercase
// 4-digit-domain form sysfs and the kubelet use, "0000:07:00.0".
func normalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	domain, rest, ok := strings.Cut(id, ":")
	if ok && len(domain) > 4 {
		domain = domain[len(domain)-4:]
	}
	if !ok {
		return id
	}
	return domain + ":" + rest
}

func unknownOnError(s string, err error) string {
	if err != nil || s == "" {
		return Unknown
	}
	return s
}
