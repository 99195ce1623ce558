package fakenode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// GPUs bound to vfio-pci for virtual machines: NVML does not see them, so
// the node describes them in a sysfs tree (WriteSysfs) that discovery reads
// as it reads a host's /sys. The tree holds the node's NVML GPUs too, bound
// to nvidia, as on a host.

// VFIOSpec is one entry of Spec.VFIO: GPUs bound to vfio-pci.
type VFIOSpec struct {
	// Product is a catalog key; it gives the PCI device ID.
	Product string `json:"product"`
	// Count repeats the entry (default 1).
	Count *int `json:"count,omitempty"`
	// NUMA is the GPUs' NUMA node (default 0; -1: sysfs reports none).
	NUMA *int `json:"numa,omitempty"`
	// Audio puts the card's HD audio function (function 1 of the GPU's
	// slot, as on cards with display outputs) in the GPU's IOMMU group,
	// bound to this driver: vfio-pci (the VM gets the whole group) or a
	// host driver such as snd_hda_intel (then the group cannot be passed
	// through). Only products with display outputs have one.
	Audio string `json:"audio,omitempty"`
	// SharedGroup puts the entry's GPUs in one IOMMU group, as GPUs behind
	// a PCIe switch without ACS.
	SharedGroup bool `json:"sharedGroup,omitempty"`
}

// audioDeviceIDs are the PCI device IDs of the HD audio function of the
// catalog products that have display outputs (pci.ids: "AD102 High
// Definition Audio Controller").
var audioDeviceIDs = map[string]uint16{"L40S": 0x22ba}

// vfioLayout is one VFIO GPU of a layout.
type vfioLayout struct {
	product *product
	numa    int // -1: not reported
	audio   string
	group   int // IOMMU group, assigned when the layout is complete
}

// VFIOState is how a VFIO GPU stands in the node's sysfs tree
// (SetVFIOState).
type VFIOState int

// The states of a VFIO GPU.
const (
	// VFIOBound: bound to vfio-pci; /dev/vfio/<group> exists.
	VFIOBound VFIOState = iota
	// VFIOUnbound: unbound from vfio-pci (its driver_override still says
	// vfio-pci); /dev/vfio/<group> is gone once no device of the group is
	// bound to vfio-pci, as the kernel removes it.
	VFIOUnbound
	// VFIORemoved: gone from the PCI bus (echo 1 > .../remove); setting
	// another state brings it back (a rescan).
	VFIORemoved
)

// String names the state: bound, unbound or removed.
func (s VFIOState) String() string {
	switch s {
	case VFIOBound:
		return "bound"
	case VFIOUnbound:
		return "unbound"
	case VFIORemoved:
		return "removed"
	}
	return "VFIOState(" + strconv.Itoa(int(s)) + ")"
}

// vfioEntries validates the vfio entries; first is the number of GPUs
// NVML sees, which the VFIO GPUs follow on the PCI bus.
func (v *validator) vfioEntries(specs []VFIOSpec, first int) []vfioLayout {
	var out []vfioLayout
	group := groupBase + first
	for i := range specs {
		s := &specs[i]
		path := fmt.Sprintf("vfio[%d]", i)
		before := len(v.errs)
		count, numa := v.countAndNUMA(path, s.Count, s.NUMA)
		p, ok := v.cat.product(s.Product)
		switch {
		case s.Product == "":
			v.fail(path+".product", "is required (known products: %s)", strings.Join(v.cat.keys(), ", "))
		case !ok:
			v.fail(path+".product", "%q is not a known product (known products: %s)", s.Product, strings.Join(v.cat.keys(), ", "))
		case s.Audio != "" && audioDeviceIDs[p.key] == 0:
			v.fail(path+".audio", "%s has no audio function (no display outputs); remove audio", p.key)
		case s.Audio != "" && !validDriverName(s.Audio):
			v.fail(path+".audio", "%q is not a driver name like vfio-pci or snd_hda_intel", s.Audio)
		}
		if len(v.errs) > before {
			continue
		}
		for k := range count {
			if k == 0 || !s.SharedGroup {
				group++
			}
			out = append(out, vfioLayout{product: p, numa: numa, audio: s.Audio, group: group - 1})
		}
	}
	return out
}

// groupBase is the IOMMU group of the node's first GPU; the others follow
// in PCI address order.
const groupBase = 30

// validDriverName reports whether s looks like a Linux driver name.
func validDriverName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}

// VFIOCount returns the number of the node's GPUs bound to vfio-pci (in
// any VFIOState).
func (n *Node) VFIOCount() int { return len(n.vfio) }

// VFIOAddress returns the PCI address of VFIO GPU i ("0000:47:00.0").
func (n *Node) VFIOAddress(i int) (string, error) {
	if i < 0 || i >= len(n.vfio) {
		return "", n.noVFIO(i)
	}
	return n.vfioAddress(i), nil
}

func (n *Node) noVFIO(i int) error {
	return fmt.Errorf("fake node %s has no VFIO GPU %d (it has %d)", n.Name(), i, len(n.vfio))
}

// vfioAddress is the sysfs address of VFIO GPU i: after the NVML GPUs.
func (n *Node) vfioAddress(i int) string {
	return strings.ToLower(gpuAddress(len(n.gpus) + i).legacy())
}

// WriteSysfs lays out the node's PCI devices under dir as a host's sysfs
// and /dev hold them: sys/devices/pci0000:00/<address> with vendor,
// device, class, subsystem IDs, numa_node, driver_override and the driver
// and iommu_group links; sys/bus/pci/devices/<address> links to them,
// sys/bus/pci/drivers/<driver>, sys/kernel/iommu_groups/<n>/devices, and
// dev/vfio/vfio with dev/vfio/<n> for every group a device is bound to
// vfio-pci in. NVML's GPUs are bound to nvidia; device nodes are plain
// empty files. Discovery reads it with the directory as sysfs root.
//
// The node remembers dir: SetVFIOState changes every tree it wrote.
// Writing a tree again (a new node from a changed file) replaces what an
// earlier one left there. A directory that holds a sys or dev/vfio that no
// fake node wrote (a host's root, mounted by mistake) is refused, so that
// nothing real is replaced.
func (n *Node) WriteSysfs(dir string) error {
	if dir == "" {
		return errors.New("fake sysfs: empty directory")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := claimSysfsDir(dir); err != nil {
		return n.sysfsError(err)
	}
	for _, sub := range []string{"sys/devices/pci0000:00", "sys/bus/pci", "sys/kernel/iommu_groups", "dev/vfio"} {
		if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(sub))); err != nil {
			return n.sysfsError(err)
		}
	}
	for _, d := range []string{"nvidia", "vfio-pci", "snd_hda_intel"} {
		if err := os.MkdirAll(filepath.Join(dir, "sys/bus/pci/drivers", d), 0o755); err != nil {
			return n.sysfsError(err)
		}
	}
	if err := touch(filepath.Join(dir, "dev/vfio/vfio")); err != nil {
		return n.sysfsError(err)
	}
	for i, g := range n.gpus {
		class := "0x030200"
		if g.extra.graphics {
			class = "0x030000"
		}
		f := pciFunction{addr: strings.ToLower(g.addr.legacy()), device: uint16(g.product.pciDeviceID >> 16), class: class,
			numa: g.numa, driver: "nvidia", group: groupBase + i}
		if err := f.write(dir); err != nil {
			return n.sysfsError(err)
		}
	}
	if !slices.Contains(n.sysfsDirs, dir) {
		n.sysfsDirs = append(n.sysfsDirs, dir)
	}
	for i := range n.vfio {
		if err := n.writeVFIO(dir, i); err != nil {
			return n.sysfsError(err)
		}
	}
	return nil
}

// sysfsMarker marks a directory a fake node laid a sysfs tree out in.
const sysfsMarker = ".featureplug-fake-sysfs"

// claimSysfsDir makes dir a fake sysfs root: it refuses one that holds a
// sys or dev/vfio not marked as a fake node's, and marks it.
func claimSysfsDir(dir string) error {
	marker := filepath.Join(dir, sysfsMarker)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	for _, sub := range []string{"sys", "dev/vfio"} {
		if _, err := os.Lstat(filepath.Join(dir, sub)); err == nil {
			return fmt.Errorf("%s holds a %s no fake node laid out (is it a host's root?); give the fake node an empty directory", dir, sub)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(marker, []byte("a fake node's sysfs tree (featureplug); safe to remove\n"), 0o644)
}

func (n *Node) sysfsError(err error) error {
	return fmt.Errorf("fake sysfs of node %s: %w", n.spec.Name, err)
}

// SetVFIOState binds VFIO GPU i to vfio-pci, unbinds it or removes it from
// the PCI bus, in every sysfs tree the node wrote (see WriteSysfs), as an
// operator's echo into sysfs does on a host: a fault for tests of device
// health. The change shows at the next discovery.
func (n *Node) SetVFIOState(i int, s VFIOState) error {
	if i < 0 || i >= len(n.vfio) {
		return n.noVFIO(i)
	}
	if s < VFIOBound || s > VFIORemoved {
		return fmt.Errorf("fake node %s: %v is not a VFIO state", n.Name(), s)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.vfioStates[i] = s
	for _, dir := range n.sysfsDirs {
		if err := n.writeVFIO(dir, i); err != nil {
			return n.sysfsError(err)
		}
	}
	return nil
}

// writeVFIO writes VFIO GPU i and its audio function as their state says,
// and its group's /dev/vfio node. node.mu is held.
func (n *Node) writeVFIO(dir string, i int) error {
	l := n.vfio[i]
	state := n.vfioStates[i]
	addr := n.vfioAddress(i)
	gpu := pciFunction{addr: addr, device: uint16(l.product.pciDeviceID >> 16), class: "0x030200",
		numa: l.numa, override: "vfio-pci", group: l.group}
	if state == VFIOBound {
		gpu.driver = "vfio-pci"
	}
	funcs := []pciFunction{gpu}
	if l.audio != "" {
		audio := pciFunction{addr: strings.TrimSuffix(addr, ".0") + ".1", device: audioDeviceIDs[l.product.key],
			class: "0x040300", numa: l.numa, driver: l.audio, group: l.group}
		if l.audio == "vfio-pci" {
			audio.override = "vfio-pci"
		}
		funcs = append(funcs, audio)
	}
	for _, f := range funcs {
		var err error
		if state == VFIORemoved {
			err = f.remove(dir)
		} else {
			err = f.write(dir)
		}
		if err != nil {
			return err
		}
	}
	return n.writeGroupNode(dir, l.group)
}

// writeGroupNode creates dev/vfio/<group> while a device of the group is
// bound to vfio-pci and removes it otherwise. node.mu is held.
func (n *Node) writeGroupNode(dir string, group int) error {
	bound := false
	for j, o := range n.vfio {
		if o.group != group || n.vfioStates[j] == VFIORemoved {
			continue
		}
		bound = bound || n.vfioStates[j] == VFIOBound || o.audio == "vfio-pci"
	}
	p := filepath.Join(dir, "dev/vfio", strconv.Itoa(group))
	if !bound {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return touch(p)
}

// pciFunction is one PCI function of a fake sysfs tree.
type pciFunction struct {
	addr     string // "0000:47:00.0"
	device   uint16
	class    string // "0x030200"
	numa     int
	driver   string // "" unbound
	override string // driver_override, "" for none
	group    int
}

// write lays the function out (again), replacing its links.
func (f pciFunction) write(dir string) error {
	dev := filepath.Join(dir, "sys/devices/pci0000:00", f.addr)
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	override := f.override
	if override == "" {
		override = "(null)"
	}
	files := map[string]string{
		"vendor": "0x10de", "device": fmt.Sprintf("0x%04x", f.device), "class": f.class,
		"subsystem_vendor": "0x10de", "subsystem_device": fmt.Sprintf("0x%04x", f.device+0x1000),
		"numa_node": strconv.Itoa(f.numa), "driver_override": override,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dev, name), []byte(content+"\n"), 0o644); err != nil {
			return err
		}
	}
	links := map[string]string{
		filepath.Join(dev, "iommu_group"):                                                       "../../../kernel/iommu_groups/" + strconv.Itoa(f.group),
		filepath.Join(dir, "sys/bus/pci/devices", f.addr):                                       "../../../devices/pci0000:00/" + f.addr,
		filepath.Join(dir, "sys/kernel/iommu_groups", strconv.Itoa(f.group), "devices", f.addr): "../../../../devices/pci0000:00/" + f.addr,
	}
	if f.driver != "" {
		links[filepath.Join(dev, "driver")] = "../../../bus/pci/drivers/" + f.driver
		if err := os.MkdirAll(filepath.Join(dir, "sys/bus/pci/drivers", f.driver), 0o755); err != nil {
			return err
		}
	} else if err := os.Remove(filepath.Join(dev, "driver")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for link, target := range links {
		if err := symlink(target, link); err != nil {
			return err
		}
	}
	return nil
}

// remove takes the function off the fake bus.
func (f pciFunction) remove(dir string) error {
	for _, p := range []string{
		filepath.Join(dir, "sys/bus/pci/devices", f.addr),
		filepath.Join(dir, "sys/kernel/iommu_groups", strconv.Itoa(f.group), "devices", f.addr),
		filepath.Join(dir, "sys/devices/pci0000:00", f.addr),
	} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// symlink makes link point at target, replacing what link was.
func symlink(target, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Symlink(target, link)
}
