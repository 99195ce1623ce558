package fakenode

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// MIGStateFile is where, under a fake driver root, a fake node keeps the
// MIG state of its GPUs (KeepMIGState).
const MIGStateFile = "run/featureplug-fake/mig-state.json"

// migStateVersion is the format version of the MIG state file.
const migStateVersion = 1

// migState is the content of the MIG state file: for each GPU, what the
// NVIDIA kernel driver keeps across the processes that call NVML.
type migState struct {
	Version int `json:"version"`
	// Node and Digest identify the node file the state belongs to: a
	// node file edited since (new GPUs, a new layout: the machine was
	// re-partitioned) starts from its own content again.
	Node   string        `json:"node"`
	Digest string        `json:"digest"`
	GPUs   []migStateGPU `json:"gpus"`
}

type migStateGPU struct {
	UUID       string `json:"uuid"`
	MIGEnabled bool   `json:"migEnabled"`
	Pending    bool   `json:"pending"`
	Generation uint64 `json:"generation"`
	// Instances are the GPU instances, by ID.
	Instances []migStateGI `json:"instances,omitempty"`
}

type migStateGI struct {
	ID        uint32       `json:"id"`
	ProfileID uint32       `json:"profileID"`
	Start     int          `json:"start"`
	Compute   []migStateCI `json:"computeInstances,omitempty"`
}

type migStateCI struct {
	ID     uint32 `json:"id"`
	Slices int    `json:"slices"`
	UUID   string `json:"uuid"`
}

// KeepMIGState makes the node keep its GPUs' MIG state (MIG modes, GPU
// and compute instances with their IDs and MIG device UUIDs) in the file
// at path, as the NVIDIA kernel driver keeps it for the processes that
// call NVML: a state the file holds for this node file is taken over
// first, and from then on every change NVML makes (a GPU or compute
// instance created or destroyed, a MIG mode set, a GPU reset) is in the
// file before the NVML call returns. An agent killed with SIGKILL and
// started again on the same file thus finds the MIG devices it had
// created, as it would on a real GPU. The file is replaced by a rename
// without fsync: a process killed loses nothing the kernel has; only a
// power loss, which would reset a real GPU too, may. A change the file
// cannot take is refused by the NVML call (ERROR_UNKNOWN), changing
// nothing.
func (n *Node) KeepMIGState(path string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("fake node %s: MIG state: %w", n.Name(), err)
	default:
		var st migState
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("fake node %s: MIG state %s: %w", n.Name(), path, err)
		}
		if st.Version == migStateVersion && st.Node == n.Name() && st.Digest == n.digest {
			if err := n.restoreMIGLocked(&st); err != nil {
				return fmt.Errorf("fake node %s: MIG state %s: %w", n.Name(), path, err)
			}
		}
	}
	n.migStatePath = path
	return n.saveMIGLocked()
}

// restoreMIGLocked replaces the GPUs' MIG state with st's. The caller
// holds n.mu.
func (n *Node) restoreMIGLocked(st *migState) error {
	if len(st.GPUs) != len(n.gpus) {
		return fmt.Errorf("%d GPUs, the node has %d", len(st.GPUs), len(n.gpus))
	}
	for i, sg := range st.GPUs {
		g := n.gpus[i]
		if sg.UUID != g.uuid {
			return fmt.Errorf("GPU %d is %s, the node's is %s", i, sg.UUID, g.uuid)
		}
		var gis []*gpuInstance
		for _, sgi := range sg.Instances {
			p, ok := g.product.profileByID(sgi.ProfileID)
			if !ok || !slices.Contains(p.starts, sgi.Start) {
				return fmt.Errorf("GPU %d: no profile %d at memory slice %d", i, sgi.ProfileID, sgi.Start)
			}
			gi := &gpuInstance{gpu: g, id: sgi.ID, profile: p, start: sgi.Start}
			for _, sci := range sgi.Compute {
				ci := &computeInstance{gi: gi, id: sci.ID, slices: sci.Slices, uuid: sci.UUID}
				ci.handle = newMIGHandle(ci)
				gi.cis = append(gi.cis, ci)
			}
			gis = append(gis, gi)
		}
		g.migEnabled, g.migCtl.pending, g.migCtl.generation, g.gis = sg.MIGEnabled, sg.Pending, sg.Generation, gis
	}
	return nil
}

// saveMIGLocked writes the MIG state file, when the node keeps one. The
// caller holds n.mu.
func (n *Node) saveMIGLocked() error {
	if n.migStatePath == "" {
		return nil
	}
	st := migState{Version: migStateVersion, Node: n.Name(), Digest: n.digest}
	for _, g := range n.gpus {
		sg := migStateGPU{UUID: g.uuid, MIGEnabled: g.migEnabled, Pending: g.migCtl.pending, Generation: g.migCtl.generation}
		for _, gi := range g.gis {
			sgi := migStateGI{ID: gi.id, ProfileID: gi.profile.id, Start: gi.start}
			for _, ci := range gi.cis {
				sgi.Compute = append(sgi.Compute, migStateCI{ID: ci.id, Slices: ci.slices, UUID: ci.uuid})
			}
			sg.Instances = append(sg.Instances, sgi)
		}
		st.GPUs = append(st.GPUs, sg)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(n.migStatePath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("fake node %s: MIG state: %w", n.Name(), err)
	}
	tmp, err := os.CreateTemp(dir, ".mig-state-*.tmp")
	if err != nil {
		return fmt.Errorf("fake node %s: MIG state: %w", n.Name(), err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op after the rename
	_, err = tmp.Write(append(data, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), n.migStatePath)
	}
	if err != nil {
		return fmt.Errorf("fake node %s: MIG state: %w", n.Name(), err)
	}
	return nil
}

// gpuMIGSnapshot is a GPU's MIG state before a change, to undo it.
type gpuMIGSnapshot struct {
	g          *gpu
	migEnabled bool
	migCtl     migControl
	gis        []*gpuInstance
	cis        [][]*computeInstance
}

// snapshotLocked records g's MIG state. The caller holds node.mu.
func (g *gpu) snapshotLocked() gpuMIGSnapshot {
	s := gpuMIGSnapshot{g: g, migEnabled: g.migEnabled, migCtl: g.migCtl, gis: slices.Clone(g.gis)}
	for _, gi := range g.gis {
		s.cis = append(s.cis, slices.Clone(gi.cis))
	}
	return s
}

// commitLocked makes a change to the GPU's MIG state durable: it writes
// the state file (when the node keeps one) and reports true; when that
// fails it puts the state back as the snapshot had it and reports false
// (the NVML call then answers ERROR_UNKNOWN). The caller holds node.mu.
func (s gpuMIGSnapshot) commitLocked() bool {
	if err := s.g.node.saveMIGLocked(); err == nil {
		return true
	}
	g := s.g
	for _, gi := range g.gis {
		if !slices.Contains(s.gis, gi) {
			gi.destroyed = true // created by the change
		}
	}
	g.migEnabled, g.migCtl, g.gis = s.migEnabled, s.migCtl, s.gis
	for i, gi := range g.gis {
		gi.destroyed = false
		for _, ci := range gi.cis {
			if !slices.Contains(s.cis[i], ci) {
				ci.destroyed = true
			}
		}
		gi.cis = s.cis[i]
		for _, ci := range gi.cis {
			ci.destroyed = false
		}
	}
	return false
}

// digestOf identifies a node file's content.
func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
