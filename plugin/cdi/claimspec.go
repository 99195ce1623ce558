package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// claimFilePrefix starts the name of a claim's spec file. The Sink's
// stale-file sweep leaves these alone: they belong to the prepared claims
// of the DRA driver, which removes each at unprepare.
const claimFilePrefix = filePrefix + "claim-"

// ClaimSpecs writes the CDI spec of one DRA claim's devices that exist
// only once the claim is prepared (the MIG device created for it, a whole
// GPU partitioned on demand), one file per claim beside the Sink's spec,
// of the same kind: featureplug-claim-<uid>.yaml.
type ClaimSpecs struct {
	// Options name the spec's kind and devices, as the Sink's.
	Options Options
	// Writer is the spec directory.
	Writer Writer
	// Generator finds the devices' edits.
	Generator Generator
	// Discover reads the node's devices as they are now (a MIG device
	// created a moment ago included): the GPU source's Discover.
	Discover func() (*discovery.Inventory, nvml.Interface, error)
}

// ClaimSpecPath is the path of a claim's spec file.
func (c ClaimSpecs) ClaimSpecPath(claimUID string) string {
	return filepath.Join(c.Writer.dir(), claimFilePrefix+claimUID+".yaml")
}

// Write writes the spec of the claim's devices (each found in a fresh
// discovery by its ID: a GPU or MIG UUID) and returns their qualified CDI
// device names, in the order of devs. It writes the file atomically, and
// only a spec that loads.
func (c ClaimSpecs) Write(claimUID string, resource string, devs []plan.Device) ([]string, error) {
	if c.Discover == nil || c.Generator == nil {
		return nil, errors.New("CDI claim spec: no device discovery or generator")
	}
	inv, _, err := c.Discover()
	if err != nil {
		return nil, fmt.Errorf("CDI spec of claim %s: discovering the devices: %w", claimUID, err)
	}
	found := make([]plan.Device, len(devs))
	for i, d := range devs {
		if found[i], err = resolveDevice(inv, d); err != nil {
			return nil, fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
		}
	}
	p := &plan.Plan{Resources: []plan.Resource{{Name: resource, Devices: found}}}
	spec, err := Build(c.Options, c.Generator, inv, p)
	if err != nil {
		return nil, fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	if spec == nil {
		return nil, fmt.Errorf("CDI spec of claim %s: no device", claimUID)
	}
	if _, err := writeSpec(c.ClaimSpecPath(claimUID), spec); err != nil {
		return nil, fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	vendor, class := parser.ParseQualifier(c.Options.Kind)
	ids := make([]string, len(found))
	for i, d := range found {
		ids[i] = parser.QualifiedName(vendor, class, c.Options.DeviceName(d))
	}
	return ids, nil
}

// Remove removes the claim's spec file; one already gone is done.
func (c ClaimSpecs) Remove(claimUID string) error {
	err := os.Remove(c.ClaimSpecPath(claimUID))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// resolveDevice fills in d, a GPU or MIG device named by its UUID, from inv: its
// index and parent, as the spec names and finds it.
func resolveDevice(inv *discovery.Inventory, d plan.Device) (plan.Device, error) {
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if d.Kind != plan.DeviceMIG && g.UUID == d.ID {
			d.GPUUUID, d.GPUIndex, d.Index = g.UUID, g.Index, strconv.Itoa(g.Index)
			return d, nil
		}
		for _, m := range g.MIGDevices {
			if d.Kind == plan.DeviceMIG && m.UUID == d.ID {
				d.GPUUUID, d.GPUIndex, d.Index = g.UUID, g.Index, fmt.Sprintf("%d:%d", g.Index, m.Index)
				return d, nil
			}
		}
	}
	return d, fmt.Errorf("device %s is not on the node", d.ID)
}
