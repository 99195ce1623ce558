// Package migpartition lays out the GPUs the rules partition on demand
// (plan.DynamicMIG) as the partitionable devices of resource.k8s.io/v1 in
// Kubernetes 1.37 (KEP-4815): per GPU a counter set (its memory slices,
// compute slices, and the engines that limit its layouts, such as the one
// OFA the +me profile takes), one device per placement of every offered
// profile consuming what that placement takes, and the whole GPU as a
// device consuming all of it, so that the scheduler only ever allocates
// placements that fit together and never a whole GPU next to a MIG device.
// It splits them into ResourceSlices within the API's limits and resolves
// an allocated device's name back to the MIG device to create.
//
// It is pure: it reads only the plan, as the DRA sink does, and calls
// neither NVML nor the API server.
package migpartition

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/rules/plan"
)

// The API's limits the layout keeps to (k8s.io/api/resource/v1 of 1.37,
// checked by the API server's validation): a slice holds either counter
// sets or devices, at most 8 counter sets, and at most 64 devices once any
// device consumes counters; a counter set holds at most 32 counters, and a
// device's consumption of one set at most 32.
const (
	MaxCounterSetsPerSlice   = resourceapi.ResourceSliceMaxCounterSets
	MaxDevicesPerSlice       = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	MaxCountersPerCounterSet = resourceapi.ResourceSliceMaxCountersPerCounterSet
)

// Counter names of a GPU's counter set.
const (
	// CounterComputeSlices counts compute slices.
	CounterComputeSlices = "compute-slices"
	// memorySlicePrefix starts the name of one memory slice's counter
	// (capacity 1): "memory-slice-0" ... "memory-slice-7".
	memorySlicePrefix = "memory-slice-"
)

// MemorySliceCounter names the counter of memory slice i.
func MemorySliceCounter(i int) string { return memorySlicePrefix + strconv.Itoa(i) }

// EngineCounter names the counter of an engine kind: "copy-engines",
// "decoders", "encoders", "jpeg-engines", "ofa-engines".
func EngineCounter(k migplace.EngineKind) string {
	switch k {
	case migplace.EngineDecoder:
		return "decoders"
	case migplace.EngineEncoder:
		return "encoders"
	}
	return string(k) + "-engines"
}

// Options change what the layout holds.
type Options struct {
	// Created reports whether featureplug created the MIG device with the
	// given UUID for a claim (the prepared claims it keeps). A GPU holding
	// a MIG device it did not create is withheld: its layout is not the
	// scheduler's to choose. nil counts none as created.
	Created func(uuid string) bool
	// Decorate, when set, adds attributes and capacities to each device:
	// the whole GPU (profile nil) and each placement. It must not touch
	// ConsumesCounters.
	Decorate func(g *plan.DynamicGPU, profile *plan.DynamicProfile, pl migplace.Placement, d *resourceapi.Device)
}

// Slice is one ResourceSlice's share of the layout: counter sets or
// devices, never both.
type Slice struct {
	SharedCounters []resourceapi.CounterSet
	Devices        []resourceapi.Device
}

// Withheld is a GPU left out of the layout.
type Withheld struct {
	// GPU is the GPU's UUID.
	GPU string
	// Reason says why.
	Reason string
}

// Layout is the partitionable-device form of the dynamic GPUs. Within a
// GPU its devices are the whole GPU, then every profile's placements in
// the GPU's profile order, each profile's highest start first.
type Layout struct {
	// Slices are the counter-set slices, then the device slices; one
	// GPU's devices share a slice unless they fill more than one.
	Slices []Slice
	// Withheld are the GPUs left out, in plan order.
	Withheld []Withheld
	// byName resolves device names.
	byName map[string]Allocated
	// scarce memoizes ScarceEngines by the GPU's product and profiles:
	// the GPUs of a node are alike, and the search takes a millisecond.
	scarce map[string][]migplace.EngineKind
}

// Allocated is what an allocated device of the layout stands for.
type Allocated struct {
	// GPU is the GPU's UUID.
	GPU string
	// Whole is set for the whole-GPU device.
	Whole bool
	// Target is the MIG device to create, for a placement device.
	Target migplace.Target
}

// Build lays out gpus; a GPU that holds MIG devices featureplug did not
// create is withheld. A GPU's counter set holds at most 14 counters (8
// memory slices, the compute slices and the 5 engine kinds), within the
// API's 32.
func Build(gpus []plan.DynamicGPU, o Options) Layout {
	created := o.Created
	if created == nil {
		created = func(string) bool { return false }
	}
	l := Layout{byName: map[string]Allocated{}, scarce: map[string][]migplace.EngineKind{}}
	var sets []resourceapi.CounterSet
	var perGPU [][]resourceapi.Device
	for i := range gpus {
		g := &gpus[i]
		if why := foreign(g, created); why != "" {
			l.Withheld = append(l.Withheld, Withheld{GPU: g.UUID, Reason: why})
			continue
		}
		set, devs := l.gpu(g, o.Decorate)
		sets = append(sets, set)
		perGPU = append(perGPU, devs)
	}
	for len(sets) > 0 {
		n := min(len(sets), MaxCounterSetsPerSlice)
		l.Slices = append(l.Slices, Slice{SharedCounters: sets[:n:n]})
		sets = sets[n:]
	}
	l.Slices = append(l.Slices, pack(perGPU)...)
	return l
}

// foreign says why a GPU is withheld for its existing MIG devices, "" when
// featureplug created them all.
func foreign(g *plan.DynamicGPU, created func(string) bool) string {
	var others []string
	for _, m := range g.Existing {
		if !created(m.UUID) {
			others = append(others, m.Profile+" "+m.Placement.String()+" ("+m.UUID+")")
		}
	}
	if len(others) == 0 {
		return ""
	}
	return fmt.Sprintf("GPU %d holds MIG devices featureplug did not create: %s; remove them (nvidia-smi mig -dci, -dgi) or serve them with a devices: mig rule", g.Index, strings.Join(others, ", "))
}

// pack fills device slices GPU by GPU, first fit: a GPU's devices stay in
// one slice when they fit in one, and a GPU with more than a slice holds
// fills several.
func pack(perGPU [][]resourceapi.Device) []Slice {
	var out []Slice
	for _, devs := range perGPU {
		for len(devs) > 0 {
			placed := false
			if len(devs) <= MaxDevicesPerSlice {
				for i := range out {
					if len(out[i].Devices)+len(devs) <= MaxDevicesPerSlice {
						out[i].Devices = append(out[i].Devices, devs...)
						placed = true
						break
					}
				}
			}
			if placed {
				break
			}
			n := min(len(devs), MaxDevicesPerSlice)
			out = append(out, Slice{Devices: slices.Clone(devs[:n])})
			devs = devs[n:]
		}
	}
	return out
}

// counters is a GPU's counter set content or a device's consumption.
type counters map[string]resourceapi.Counter

func (c counters) set(name string, n int) {
	if n > 0 {
		c[name] = resourceapi.Counter{Value: *resource.NewQuantity(int64(n), resource.DecimalSI)}
	}
}

// consumption returns what c takes of the published counters.
func consumption(c migplace.Counters, scarce []migplace.EngineKind) counters {
	out := counters{}
	for i := range migplace.MemorySlices {
		if c.MemorySlices&(1<<i) != 0 {
			out.set(MemorySliceCounter(i), 1)
		}
	}
	out.set(CounterComputeSlices, c.ComputeSlices)
	for _, k := range scarce {
		out.set(EngineCounter(k), c.Engines.Count(k))
	}
	return out
}

// gpu lays out one GPU: its counter set and devices.
func (l *Layout) gpu(g *plan.DynamicGPU, decorate func(*plan.DynamicGPU, *plan.DynamicProfile, migplace.Placement, *resourceapi.Device)) (resourceapi.CounterSet, []resourceapi.Device) {
	key := fmt.Sprint(g.Product, g.Capacity)
	profiles := make([]migplace.Profile, len(g.Profiles))
	for i := range g.Profiles {
		profiles[i] = g.Profiles[i].Profile
		key += fmt.Sprint(" ", profiles[i].ID, profiles[i].Placements)
	}
	scarce, ok := l.scarce[key]
	if !ok {
		scarce = migplace.ScarceEngines(profiles, g.Capacity)
		l.scarce[key] = scarce
	}
	set := resourceapi.CounterSet{Name: CounterSetName(g.UUID), Counters: consumption(g.Capacity, scarce)}
	var devs []resourceapi.Device
	add := func(name string, c counters, p *plan.DynamicProfile, pl migplace.Placement, a Allocated) {
		d := resourceapi.Device{Name: name, ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: c}}}
		if decorate != nil {
			decorate(g, p, pl, &d)
		}
		devs = append(devs, d)
		l.byName[name] = a
	}
	if g.WholeGPU != "" {
		add(WholeGPUDeviceName(g.UUID), consumption(g.Capacity, scarce), nil, migplace.Placement{Start: 0, Size: migplace.MemorySlices}, Allocated{GPU: g.UUID, Whole: true})
	}
	for i := range g.Profiles {
		p := &g.Profiles[i]
		// Highest start first: the scheduler takes the first device that
		// fits, and small instances at the top leave the low, aligned
		// slices to the large profiles (as NVML's own default placement
		// does).
		for _, pl := range slices.Backward(p.Placements) {
			add(PlacementDeviceName(g.UUID, p.Name, p.ID, pl.Start), consumption(p.Counters(pl), scarce), p, pl, Allocated{GPU: g.UUID, Target: p.Target(g.UUID, pl)})
		}
	}
	return set, devs
}

// Lookup returns what the layout's device name stands for.
func (l *Layout) Lookup(name string) (Allocated, bool) {
	a, ok := l.byName[name]
	return a, ok
}

// Devices counts the layout's devices.
func (l *Layout) Devices() int {
	n := 0
	for _, s := range l.Slices {
		n += len(s.Devices)
	}
	return n
}

// CounterSetName names a GPU's counter set: "<GPU device name>-counters"
// (a DNS label; the device name is draattr.DeviceName of the UUID).
func CounterSetName(gpuUUID string) string {
	return draattr.DeviceName(gpuUUID) + "-counters"
}

// WholeGPUDeviceName names a dynamic GPU's whole-GPU device: the name a
// whole GPU has in featureplug's slices (draattr.DeviceName).
func WholeGPUDeviceName(gpuUUID string) string { return draattr.DeviceName(gpuUUID) }

// PlacementDeviceName names the device of one placement:
// "<GPU device name>-mig-<profile>-<profile ID>-<start>", e.g.
// "gpu-6f4a...-mig-3g40gb-9-4", with the profile's letters and digits
// only. It says everything Prepare needs (ParseDeviceName), so that a
// claim allocated before a restart or a rules change is still resolved.
func PlacementDeviceName(gpuUUID, profile string, profileID uint32, start int) string {
	var token strings.Builder
	for _, r := range strings.ToLower(profile) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			token.WriteRune(r)
		}
	}
	return fmt.Sprintf("%s-mig-%s-%d-%d", draattr.DeviceName(gpuUUID), token.String(), profileID, start)
}

// DeviceRef is what a placement device's name says.
type DeviceRef struct {
	// GPU is the GPU's device name (draattr.DeviceName of its UUID).
	GPU string
	// ProfileID is the GPU instance profile ID, Start the placement's
	// first memory slice.
	ProfileID uint32
	Start     int
}

// ParseDeviceName reads a placement device's name; false for any other
// name (a whole GPU, another driver's device).
func ParseDeviceName(name string) (DeviceRef, bool) {
	parts := strings.Split(name, "-")
	if len(parts) < 5 || parts[len(parts)-4] != "mig" {
		return DeviceRef{}, false
	}
	start, err1 := strconv.Atoi(parts[len(parts)-1])
	id, err2 := strconv.ParseUint(parts[len(parts)-2], 10, 32)
	if err1 != nil || err2 != nil || start < 0 || start >= migplace.MemorySlices || parts[len(parts)-3] == "" {
		return DeviceRef{}, false
	}
	return DeviceRef{GPU: strings.Join(parts[:len(parts)-4], "-"), ProfileID: uint32(id), Start: start}, true
}

// Sizes says what a layout needs, for capacity planning and docs.
type Sizes struct {
	GPUs, Devices, CounterSets, Counters int
	// CounterSlices and DeviceSlices count the ResourceSlices of each
	// kind.
	CounterSlices, DeviceSlices int
}

// Sizes counts the layout.
func (l *Layout) Sizes() Sizes {
	var s Sizes
	for _, sl := range l.Slices {
		if len(sl.SharedCounters) > 0 {
			s.CounterSlices++
		}
		if len(sl.Devices) > 0 {
			s.DeviceSlices++
		}
		s.CounterSets += len(sl.SharedCounters)
		for _, cs := range sl.SharedCounters {
			s.Counters += len(cs.Counters)
		}
		s.Devices += len(sl.Devices)
	}
	s.GPUs = s.CounterSets
	return s
}
