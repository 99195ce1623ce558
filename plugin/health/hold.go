package health

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/featureplug/featureplug/discovery"
)

// Hold is one reason a device is held Unhealthy: a decision of the health
// policy (discovery.Decide) and what ends it. A device has at most one hold
// per effect; later events of the same effect refresh it.
type Hold struct {
	// Effect is until-quiet, until-reset or until-reboot.
	Effect discovery.HealthEffect `json:"effect"`
	// Until is when an until-quiet hold ends unless more events come; zero
	// for the other effects and for a quiet period of 0 (no recovery).
	Until time.Time `json:"until,omitzero"`
	// BootID is the boot an until-reboot hold was taken in.
	BootID string `json:"bootID,omitempty"`
	// Kind, XID and RecoveryAction are those of the latest event.
	Kind           discovery.HealthEventKind `json:"kind"`
	XID            uint64                    `json:"xid,omitempty"`
	RecoveryAction discovery.RecoveryAction  `json:"recoveryAction,omitempty"`
	// Reason is the latest event as a short, bounded label ("xid-79",
	// Reason).
	Reason string `json:"reason"`
	// Because is the policy's decision on the latest event, in one line.
	Because string `json:"because"`
	// Since is when the hold was taken, Last its latest event.
	Since time.Time `json:"since"`
	Last  time.Time `json:"last"`
	// Events counts the events that took or refreshed the hold.
	Events uint64 `json:"events"`
}

// policyHold is the discovery.HealthHold of h.
func (h Hold) policyHold() discovery.HealthHold {
	return discovery.HealthHold{Effect: h.Effect, Until: h.Until, BootID: h.BootID}
}

// WaitsFor says in a few words what ends the hold.
func (h Hold) WaitsFor() string {
	switch h.Effect {
	case discovery.EffectUntilQuiet:
		if h.Until.IsZero() {
			return "nothing: recovery is disabled (quiet period 0)"
		}
		return "a quiet period without events, until " + h.Until.UTC().Format(time.RFC3339)
	case discovery.EffectUntilReset:
		return "a GPU reset (NVML showing no pending reset)"
	case discovery.EffectUntilReboot:
		return "a reboot of the node"
	}
	return string(h.Effect)
}

// refresh takes a later event of the hold's effect: the latest event
// names the hold, and an until-quiet hold lasts until the later of the two
// ends (never, when either never ends).
func (h *Hold) refresh(n Hold) {
	h.Kind, h.XID, h.RecoveryAction, h.Reason, h.Because = n.Kind, n.XID, n.RecoveryAction, n.Reason, n.Because
	h.Last = n.Last
	h.Events++
	switch {
	case h.Effect != discovery.EffectUntilQuiet:
		h.BootID = n.BootID
	case h.Until.IsZero() || n.Until.IsZero():
		h.Until = time.Time{}
	case n.Until.After(h.Until):
		h.Until = n.Until
	}
}

// newHold is the Hold a decision on ev puts on its device at now, in the
// boot bootID; false for decisions that leave the device healthy.
func newHold(ev discovery.HealthEvent, d discovery.HealthDecision, now time.Time, bootID string) (Hold, bool) {
	ph, ok := d.Hold(now, bootID)
	if !ok {
		return Hold{}, false
	}
	return Hold{
		Effect: ph.Effect, Until: ph.Until, BootID: ph.BootID,
		Kind: ev.Kind, XID: ev.XID, RecoveryAction: ev.RecoveryAction,
		Reason: Reason(ev.Kind, ev.XID), Because: d.Because,
		Since: now, Last: now, Events: 1,
	}, true
}

// record is what the tracker keeps of one device: its holds. A record
// without holds is deleted.
type record struct {
	// Key is the device: the MIG UUID for an event on one MIG device,
	// else the GPU UUID (the GPU and all its MIG devices).
	Key string `json:"device"`
	// GPUUUID is the physical GPU.
	GPUUUID string `json:"gpuUUID"`
	// MIGUUID is the MIG device, empty for the whole GPU.
	MIGUUID string `json:"migUUID,omitempty"`
	// Holds keep the device Unhealthy, strongest first.
	Holds []Hold `json:"holds"`
}

// strongest is the hold that keeps the device longest.
func (r *record) strongest() *Hold {
	return &r.Holds[0]
}

// hold adds h, or refreshes the hold of its effect; it reports whether
// the effect is new to the device.
func (r *record) hold(h Hold) bool {
	for i := range r.Holds {
		if r.Holds[i].Effect == h.Effect {
			r.Holds[i].refresh(h)
			return false
		}
	}
	r.Holds = append(r.Holds, h)
	slices.SortStableFunc(r.Holds, func(a, b Hold) int {
		return rank(b.Effect) - rank(a.Effect)
	})
	return true
}

// drop removes the holds ended reports ended; it reports whether any was.
func (r *record) drop(ended func(Hold) bool) bool {
	n := len(r.Holds)
	r.Holds = slices.DeleteFunc(r.Holds, ended)
	return len(r.Holds) != n
}

// quiet is the record's until-quiet hold, nil without one.
func (r *record) quiet() *Hold {
	for i := range r.Holds {
		if r.Holds[i].Effect == discovery.EffectUntilQuiet {
			return &r.Holds[i]
		}
	}
	return nil
}

// rank orders effects by how long they hold a device.
func rank(e discovery.HealthEffect) int {
	return slices.Index(discovery.HealthEffects(), e)
}

// Reason is the short, bounded label of an event: "xid-<n>" for an XID of
// NVIDIA's catalog, "xid-other" for any other, the kind for other events
// ("ecc-double-bit"), "other" for a kind discovery does not define. It is
// the reason label of featureplug_device_health and the value of the DRA
// slice's unhealthy taint.
func Reason(kind discovery.HealthEventKind, xid uint64) string {
	if kind == discovery.EventXID {
		if _, ok := discovery.LookupXID(xid); ok {
			return "xid-" + strconv.FormatUint(xid, 10)
		}
		return "xid-other"
	}
	return kindLabel(kind)
}

// describe is the one-line message of a device's holds and condition:
// the strongest hold's decision and what ends each hold, and what the
// condition found.
func describe(r *record, cond *Condition) string {
	var parts []string
	if r != nil {
		for _, h := range r.Holds {
			parts = append(parts, h.Because+"; "+string(h.Effect)+": waits for "+h.WaitsFor())
		}
	}
	if cond != nil {
		parts = append(parts, cond.Reason+": waits for "+cond.waitsFor())
	}
	return strings.Join(parts, "; and ")
}
