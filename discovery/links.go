package discovery

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The link matrix is the most NVML-hungry part of discovery: an H100 has 18
// NVLinks and an 8-GPU node 28 GPU pairs. It is read with as few calls as
// the answers allow (the budget: NVIDIA's device plugin makes 158 NVML
// calls to start on an 8x H100 node):
//
//   - the states of all of a GPU's links in one GetFieldValues call
//     (FI_DEV_NVLINK_GET_STATE, one value per link, non-zero when active;
//     *unverified* on a real driver), falling back to one GetNvLinkState
//     per link when no value answers (older drivers, GPUs without NVLink);
//   - what the first active link reaches: a peer GPU (bridged cards such as
//     H100 NVL pairs: then every active link's remote end is read once) or
//     an NVSwitch (HGX/DGX baseboards: then every active link is taken to
//     reach the switch fabric, as it does on every such baseboard, and no
//     other link is read). A GPU the fabric manager knows
//     (GetGpuFabricInfo, Hopper and later) is on the switch fabric: that
//     one call also gives its multi-node clique (gpu.clique); older GPUs
//     are asked GetNvLinkRemoteDeviceType;
//   - the PCIe common ancestor once per pair.
//
// Two GPUs that both reach the NVSwitch fabric are connected by as many
// lanes as the one with fewer active links has (a node has one fabric).

// linkReading is what discovery learned about one GPU's NVLinks.
type linkReading struct {
	// active is the number of active NVLinks.
	active int
	// direct counts lanes to peer GPUs, by position in the GPU list.
	direct map[int]int
	// switched is the number of lanes to the NVSwitch fabric.
	switched int
	// clique is the GPU's multi-node fabric clique, "" when it is not
	// fabric-attached (mode.go).
	clique string
}

// links builds the GPU link matrix, indexed by NVML index (count GPUs;
// GPUs NVML lost before naming them have empty rows), and records every
// GPU's active NVLink count in gpus[k].NVLinks.
func (r *reader) links(handles []nvml.Device, gpus []GPU, count int) (LinkMatrix, error) {
	byBus := make(map[string]int, len(gpus))
	for k, g := range gpus {
		byBus[g.PCIBusID] = k
	}
	readings := make([]linkReading, len(gpus))
	for k, h := range handles {
		if gpus[k].Lost {
			continue
		}
		lr, err := r.nvlinks(h, "GPU "+strconv.Itoa(gpus[k].Index), byBus)
		if err != nil {
			var re *readError
			if errors.As(err, &re) && lost(re.ret) {
				gpus[k].Lost = true
				continue
			}
			return nil, err
		}
		readings[k] = lr
		gpus[k].NVLinks = lr.active
		gpus[k].Clique = lr.clique
	}
	if count < 2 {
		return nil, nil
	}

	m := make(LinkMatrix, count)
	for i := range m {
		m[i] = make([]Link, count)
	}
	for a := range gpus {
		for b := a + 1; b < len(gpus); b++ {
			i, j := gpus[a].Index, gpus[b].Index
			level := nvml.GpuTopologyLevel(-1)
			if !gpus[a].Lost && !gpus[b].Lost {
				l, ret := handles[a].GetTopologyCommonAncestor(handles[b])
				if ok, err := optional(ret, "topology to GPU "+strconv.Itoa(j), "GPU "+strconv.Itoa(i)); err != nil && !lost(ret) {
					return nil, err
				} else if ok {
					level = l
				}
			}
			lanes := readings[a].direct[b]
			if readings[a].switched > 0 && readings[b].switched > 0 {
				lanes += min(readings[a].switched, readings[b].switched)
			}
			link := Link{NVLinks: lanes, PCIe: pcieLevel(level)}
			m[i][j], m[j][i] = link, link
		}
	}
	return m, nil
}

// nvlinks reads one GPU's NVLinks: which are active and what they reach.
func (r *reader) nvlinks(h nvml.Device, dev string, byBus map[string]int) (linkReading, error) {
	lr := linkReading{direct: map[int]int{}}
	active, err := r.activeLinks(h, dev)
	if err != nil || len(active) == 0 {
		return lr, err
	}
	lr.active = len(active)

	for n, l := range active {
		remote, ret := h.GetNvLinkRemotePciInfo(l)
		if lost(ret) {
			return lr, check(ret, fmt.Sprintf("NVLink %d remote PCI info", l), dev)
		}
		if ret != nvml.SUCCESS {
			continue // the far end is unknown: count the link, connect nothing
		}
		if peer, ok := byBus[normalizeBusID(busIDString(remote.BusId[:]))]; ok {
			lr.direct[peer]++
			continue
		}
		if n == 0 {
			// Not a peer: on an NVSwitch baseboard the fabric manager
			// knows the GPU. One GetGpuFabricInfo then says both that
			// every link reaches the switch fabric and, for gpu.clique,
			// whether the GPU is attached to a multi-node fabric, in
			// place of GetNvLinkRemoteDeviceType: no extra call on
			// Hopper and later; an older GPU answers NOT_SUPPORTED and
			// is asked the remote type as before (one call more).
			f, err := r.fabricInfo(h, dev)
			if err != nil {
				return lr, err
			}
			if f.onFabric {
				lr.switched, lr.clique = len(active), f.clique
				return lr, nil
			}
		}
		kind, ret := h.GetNvLinkRemoteDeviceType(l)
		if lost(ret) {
			return lr, check(ret, fmt.Sprintf("NVLink %d remote device type", l), dev)
		}
		if ret != nvml.SUCCESS || kind != nvml.NVLINK_DEVICE_TYPE_SWITCH {
			continue
		}
		if n == 0 {
			// A baseboard GPU: all its links go to the switch fabric.
			lr.switched = len(active)
			return lr, nil
		}
		lr.switched++
	}
	return lr, nil
}

// activeLinks returns the numbers of the GPU's active NVLinks: from one
// GetFieldValues call where the driver answers it, else from one
// GetNvLinkState call per link. A GPU without NVLink has none.
func (r *reader) activeLinks(h nvml.Device, dev string) ([]int, error) {
	values := make([]nvml.FieldValue, nvml.NVLINK_MAX_LINKS)
	for l := range values {
		values[l] = nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_GET_STATE, ScopeId: uint32(l)}
	}
	ret := h.GetFieldValues(values)
	if lost(ret) {
		return nil, check(ret, "NVLink states", dev)
	}
	if ret == nvml.SUCCESS {
		var active []int
		answered := false
		for l, v := range values {
			switch nvml.Return(v.NvmlReturn) {
			case nvml.SUCCESS:
				answered = true
				if fieldUint(v) != 0 {
					active = append(active, l)
				}
			case nvml.ERROR_GPU_IS_LOST:
				return nil, check(nvml.ERROR_GPU_IS_LOST, fmt.Sprintf("NVLink %d state", l), dev)
			}
		}
		if answered {
			return active, nil
		}
	}
	// Older drivers, a library without field values, or no link answered
	// (a GPU without NVLink: the first GetNvLinkState says so): link by link.
	var active []int
	for l := range nvml.NVLINK_MAX_LINKS {
		state, ret := h.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
				break // no (more) NVLinks on this GPU
			}
			return nil, check(ret, fmt.Sprintf("NVLink %d state", l), dev)
		}
		if state == nvml.FEATURE_ENABLED {
			active = append(active, l)
		}
	}
	return active, nil
}

// fieldUint decodes an unsigned field value (NVML's value union, in the
// machine's byte order).
func fieldUint(v nvml.FieldValue) uint64 {
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT, nvml.VALUE_TYPE_SIGNED_INT:
		return uint64(binary.NativeEndian.Uint32(v.Value[:4]))
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return uint64(binary.NativeEndian.Uint16(v.Value[:2]))
	default:
		return binary.NativeEndian.Uint64(v.Value[:])
	}
}
