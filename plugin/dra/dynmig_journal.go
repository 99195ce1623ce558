package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/featureplug/featureplug/discovery/migctl"
	"github.com/featureplug/featureplug/discovery/statedir"
)

// PendingMIG is a MIG device a prepare is about to create for a claim,
// recorded before the first NVML call and dropped once the claim's
// checkpoint holds the device: after a crash in between, the restarted
// agent knows the placement is its claim's (the layout counts a MIG device
// there as its own, not another's), and an unprepare of the claim, which
// the kubelet sends when the pod went away instead of retrying, destroys
// what was left there.
type PendingMIG struct {
	UID       string     `json:"uid"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	MIG       CreatedMIG `json:"mig"`
}

// journal is the file of pending MIG devices; a nil journal keeps them in
// memory only.
type journal struct {
	path string
}

func newJournal(stateDir string) *journal {
	if stateDir == "" {
		return nil
	}
	return &journal{path: statedir.Dir(stateDir).Path(statedir.DRAPendingMIGFile)}
}

// load reads the pending MIG devices; a missing file is none, an unusable
// one is an error naming it.
func (j *journal) load() ([]PendingMIG, error) {
	if j == nil {
		return nil, nil
	}
	data, err := os.ReadFile(j.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the pending MIG devices: %w", err)
	}
	var out []PendingMIG
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("pending MIG devices %s: %w", j.path, err)
	}
	for i, p := range out {
		if p.UID == "" || p.MIG.GPU == "" || p.MIG.Placement.Size == 0 {
			return nil, fmt.Errorf("pending MIG devices %s: [%d]: uid, gpu and placement must be set", j.path, i)
		}
	}
	return out, nil
}

// write replaces the file with pending, atomically (sorted, so equal sets
// give equal files); none removes it.
func (j *journal) write(pending map[string][]PendingMIG) error {
	if j == nil {
		return nil
	}
	var all []PendingMIG
	for _, ps := range pending {
		all = append(all, ps...)
	}
	if len(all) == 0 {
		if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", j.path, err)
		}
		return nil
	}
	slices.SortFunc(all, func(a, b PendingMIG) int {
		return strings.Compare(a.UID+a.MIG.GPU+a.MIG.Placement.String(), b.UID+b.MIG.GPU+b.MIG.Placement.String())
	})
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return statedir.WriteFile(j.path, append(data, '\n'), statedir.Private, nil)
}

// placementKey identifies a placement of a GPU.
func placementKey(gpu string, m CreatedMIG) string { return gpu + "/" + m.Placement.String() }

// recordPending records, before any NVML call, the MIG device a prepare
// of the claim creates. n.mu is held.
func (n *Node) recordPending(pc PreparedClaim, m CreatedMIG) error {
	p := PendingMIG{UID: pc.UID, Namespace: pc.Namespace, Name: pc.Name, MIG: m}
	if slices.ContainsFunc(n.pending[pc.UID], func(q PendingMIG) bool { return q.MIG.Placement == m.Placement && q.MIG.GPU == m.GPU }) {
		return nil
	}
	n.pending[pc.UID] = append(n.pending[pc.UID], p)
	n.created.addPlacement(placementKey(m.GPU, m))
	if err := n.journal.write(n.pending); err != nil {
		n.dropPending(pc.UID)
		return fmt.Errorf("recording the MIG device about to be created: %w", err)
	}
	return nil
}

// dropPending forgets the claim's pending MIG devices (in memory; the
// caller writes the journal). n.mu is held.
func (n *Node) dropPending(uid string) bool {
	ps, ok := n.pending[uid]
	for _, p := range ps {
		n.created.removePlacement(placementKey(p.MIG.GPU, p.MIG))
	}
	delete(n.pending, uid)
	return ok
}

// settlePending drops the pending records of claims now checkpointed (or
// given up) and writes the journal. n.mu is held.
func (n *Node) settlePending(uids []string) {
	changed := false
	for _, uid := range uids {
		changed = n.dropPending(uid) || changed
	}
	if !changed {
		return
	}
	if err := n.journal.write(n.pending); err != nil {
		// The records stay on disk: a later unprepare of a claim that
		// is prepared finds them moot (the checkpoint wins).
		n.log.Warn("could not update the pending MIG devices", "err", err)
	}
}

// unpreparePending destroys what a prepare of the claim, cut short before
// its checkpoint, left at its placements: the MIG device there of the
// recorded profile, unless another claim holds it. n.mu is held.
func (n *Node) unpreparePending(uid string) error {
	ps := n.pending[uid]
	if len(ps) == 0 {
		return nil
	}
	lib := n.nvml()
	if lib == nil {
		return errors.New("GPUs not discovered yet")
	}
	for _, p := range ps {
		m := p.MIG
		if m.Whole {
			continue
		}
		devs, err := migctl.List(lib, m.GPU)
		if err != nil {
			return err
		}
		for _, d := range devs {
			if d.Placement != m.Placement || d.ProfileID != m.ProfileID || (d.UUID != "" && n.heldByClaim(d.UUID)) {
				continue
			}
			if err := migctl.Destroy(lib, m.GPU, m.Placement, d.UUID); err != nil {
				return err
			}
			n.log.Info("destroyed what a prepare cut short left for a claim now unprepared", "claim", claimRef(p.Namespace, p.Name, p.UID),
				"gpu", m.GPU, "placement", m.Placement.String(), "mig", d.UUID)
		}
	}
	if n.opts.Partition.RemoveCDI != nil {
		if err := n.opts.Partition.RemoveCDI(uid); err != nil {
			return err
		}
	}
	n.settlePending([]string{uid})
	if n.opts.Partition.Changed != nil {
		n.opts.Partition.Changed()
	}
	return nil
}

// heldByClaim reports whether a prepared claim holds the MIG device.
// n.mu is held.
func (n *Node) heldByClaim(uuid string) bool {
	for _, c := range n.claims {
		for _, d := range c.Devices {
			if d.MIG != nil && d.MIG.UUID == uuid {
				return true
			}
		}
	}
	return false
}

// reservedMIG returns the MIG devices created for prepared claims, by
// UUID, with the claim that holds each.
func (n *Node) reservedMIG() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out map[string]string
	for _, c := range n.claims {
		for _, d := range c.Devices {
			if d.MIG != nil && d.MIG.UUID != "" {
				if out == nil {
					out = map[string]string{}
				}
				out[d.MIG.UUID] = "created for DRA claim " + c.String() + " until it ends"
			}
		}
	}
	return out
}
