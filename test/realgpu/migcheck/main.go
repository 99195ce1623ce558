// Command migcheck exercises dynamic MIG's NVML path on a real MIG-capable
// GPU (or a fake node, for a dry run): for every profile and placement the
// GPU lists it creates the MIG device through discovery/migctl (as Prepare
// will), checks that NVML and discovery see it at that placement, and
// destroys it; it probes the errors NVML returns for an occupied placement,
// a placement the profile lacks, a second +me instance and a GPU instance
// destroyed before its compute instance; and it writes what it saw as
// JSON (test/realgpu's TestMIGCheckReport compares it with the fake node).
//
//	migcheck -out mig.json [-gpu 0] [-allow-mig-mode] [-fake-node h200-mig]
//
// It touches only GPUs with no MIG device it did not create: a GPU that
// holds any is skipped. A GPU with MIG mode disabled is skipped unless
// -allow-mig-mode lets it enable MIG mode and disable it again at the end.
// Every MIG device it creates is destroyed before it exits, also on
// SIGINT/SIGTERM and on failure; a GPU left holding one is an error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migctl"
	"github.com/featureplug/featureplug/discovery/migplace"
)

// Report is what migcheck writes.
type Report struct {
	Driver string      `json:"driver"`
	GPUs   []GPUReport `json:"gpus"`
}

// GPUReport is one GPU's part.
type GPUReport struct {
	Index   int    `json:"index"`
	UUID    string `json:"uuid"`
	Product string `json:"product"`
	// Skipped says why the GPU was left alone; the rest is then empty.
	Skipped string `json:"skipped,omitempty"`
	// ModeEnabled is set when migcheck enabled MIG mode (and disabled it
	// again at the end).
	ModeEnabled bool `json:"modeEnabled,omitempty"`
	// Geometry is what NVML lists; CatalogDiffers says how it differs from
	// the catalog's entry for the product ("" when it matches or the
	// product is not in the catalog).
	Geometry       *discovery.MIGGeometry `json:"geometry,omitempty"`
	CatalogDiffers string                 `json:"catalogDiffers,omitempty"`
	// Placements are the MIG devices created and destroyed, one per
	// placement of every profile.
	Placements []PlacementReport `json:"placements,omitempty"`
	// Probes are NVML's answers to what it must refuse.
	Probes []Probe `json:"probes,omitempty"`
	// Failures are checks that failed.
	Failures []string `json:"failures,omitempty"`
}

// PlacementReport is one MIG device's creation and destruction.
type PlacementReport struct {
	Profile    string             `json:"profile"`
	Placement  migplace.Placement `json:"placement"`
	UUID       string             `json:"uuid"`
	CreateMs   float64            `json:"createMs"`
	DestroyMs  float64            `json:"destroyMs"`
	Discovered bool               `json:"discovered"`
}

// Probe is one NVML call that must fail, with what it returned.
type Probe struct {
	What string `json:"what"`
	Got  string `json:"got"`
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "mig.json", "where to write the report")
	flag.IntVar(&o.gpu, "gpu", -1, "only this GPU index (default: every MIG-capable GPU)")
	flag.BoolVar(&o.allowMode, "allow-mig-mode", false, "enable MIG mode on a GPU where it is disabled (and disable it again at the end)")
	flag.StringVar(&o.fakeNode, "fake-node", "", "a bundled fake node or fake-node file instead of the driver (a dry run)")
	flag.StringVar(&o.driverRoot, "driver-root", "/", "root of the NVIDIA driver installation")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "migcheck:", err)
		os.Exit(1)
	}
}

type options struct {
	out, fakeNode, driverRoot string
	gpu                       int
	allowMode                 bool
}

// run opens NVML, checks the GPUs and writes the report; it fails when a
// check fails or a GPU could not be left as it was found.
func run(ctx context.Context, o options) error {
	lib, closeFn, err := open(o)
	if err != nil {
		return err
	}
	defer closeFn()
	rep, err := check(ctx, lib, o)
	if data, jerr := json.MarshalIndent(rep, "", "  "); jerr == nil {
		if werr := os.WriteFile(o.out, append(data, '\n'), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	for _, g := range rep.GPUs {
		if len(g.Failures) > 0 {
			return fmt.Errorf("GPU %d: %d checks failed (see %s): %s", g.Index, len(g.Failures), o.out, g.Failures[0])
		}
	}
	return nil
}

// open opens the driver's NVML or the fake node's.
func open(o options) (nvml.Interface, func(), error) {
	if o.fakeNode == "" {
		return discovery.OpenNVML(discovery.NVMLOptions{DriverRoot: o.driverRoot})
	}
	n, err := fakenode.Open(o.fakeNode)
	if err != nil {
		return nil, nil, err
	}
	lib := n.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("fake NVML: %s", ret.Error())
	}
	return lib, func() { _ = lib.Shutdown() }, nil
}

// check runs the checks on every chosen GPU.
func check(ctx context.Context, lib nvml.Interface, o options) (Report, error) {
	inv, err := discovery.Discover(lib)
	if err != nil {
		return Report{}, err
	}
	if err := discovery.ReadMIGGeometry(lib, inv); err != nil {
		return Report{}, err
	}
	rep := Report{Driver: inv.DriverVersion}
	var errs []error
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if !g.MIGCapable || (o.gpu >= 0 && g.Index != o.gpu) {
			continue
		}
		gr, err := checkGPU(ctx, lib, g, o.allowMode)
		rep.GPUs = append(rep.GPUs, gr)
		if err != nil {
			errs = append(errs, fmt.Errorf("GPU %d: %w", g.Index, err))
		}
	}
	if len(rep.GPUs) == 0 {
		errs = append(errs, errors.New("no MIG-capable GPU to check"))
	}
	return rep, errors.Join(errs...)
}

// checkGPU checks one GPU, leaving it as it found it.
func checkGPU(ctx context.Context, lib nvml.Interface, g *discovery.GPU, allowMode bool) (gr GPUReport, err error) {
	gr = GPUReport{Index: g.Index, UUID: g.UUID, Product: g.Product}
	switch {
	case len(g.MIGDevices) > 0:
		gr.Skipped = fmt.Sprintf("it holds %d MIG devices migcheck did not create", len(g.MIGDevices))
		return gr, nil
	case g.MIGModePending:
		gr.Skipped = "a MIG mode change is pending"
		return gr, nil
	case !g.MIGEnabled && !allowMode:
		gr.Skipped = "MIG mode is disabled (-allow-mig-mode lets migcheck enable it, and disable it again at the end)"
		return gr, nil
	}
	if !g.MIGEnabled {
		if err := migctl.SetMode(lib, g.UUID, true); err != nil {
			gr.Skipped = "enabling MIG mode: " + err.Error()
			_ = migctl.SetMode(lib, g.UUID, false) // clear what is pending
			return gr, nil
		}
		gr.ModeEnabled = true
	}
	// Whatever happens below, leave the GPU as it was found.
	var made []migctl.Device
	defer func() {
		for _, d := range made {
			if derr := migctl.Destroy(lib, g.UUID, d.Placement, d.UUID); derr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up %s: %w", d, derr))
			}
		}
		if left, lerr := migctl.List(lib, g.UUID); lerr != nil || len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("the GPU is left with %v (%v)", left, lerr))
		}
		if gr.ModeEnabled {
			if merr := migctl.SetMode(lib, g.UUID, false); merr != nil {
				err = errors.Join(err, fmt.Errorf("disabling MIG mode again: %w", merr))
			}
		}
	}()
	fail := func(format string, args ...any) { gr.Failures = append(gr.Failures, fmt.Sprintf(format, args...)) }

	geo, err := geometry(lib, g.UUID)
	if err != nil || geo == nil {
		return gr, fmt.Errorf("reading MIG geometry: %v", err)
	}
	gr.Geometry = geo
	if want, ok := migplace.ProductByName(g.Product); ok && !reflect.DeepEqual(want.Profiles, geo.Profiles) {
		gr.CatalogDiffers = fmt.Sprintf("NVML lists %+v, the catalog %+v", geo.Profiles, want.Profiles)
	}

	// Every placement of every profile, one at a time.
	for _, p := range geo.Profiles {
		ci, _ := p.FullComputeInstance()
		for _, pl := range p.Placements {
			if ctx.Err() != nil {
				return gr, ctx.Err()
			}
			t := migplace.Target{GPUUUID: g.UUID, Profile: p.Name, ProfileEnum: p.Enum, ProfileID: p.ID, Placement: pl, ComputeInstanceProfile: ci}
			start := time.Now()
			d, _, err := migctl.Ensure(lib, t)
			pr := PlacementReport{Profile: p.Name, Placement: pl, CreateMs: ms(time.Since(start))}
			if err != nil {
				fail("creating %s: %v", t, err)
				continue
			}
			made = append(made, d)
			pr.UUID = d.UUID
			pr.Discovered = discovered(lib, g.UUID, d)
			if !pr.Discovered {
				fail("%s: discovery does not see %s at %s", t, d.UUID, pl)
			}
			start = time.Now()
			if err := migctl.Destroy(lib, g.UUID, pl, d.UUID); err != nil {
				fail("destroying %s: %v", d, err)
			} else {
				made = slices.DeleteFunc(made, func(x migctl.Device) bool { return x.UUID == d.UUID })
			}
			pr.DestroyMs = ms(time.Since(start))
			gr.Placements = append(gr.Placements, pr)
		}
	}
	gr.Probes, made, err = probe(lib, g.UUID, geo, made)
	return gr, err
}

// geometry reads a GPU's MIG geometry again (after enabling MIG mode).
func geometry(lib nvml.Interface, uuid string) (*discovery.MIGGeometry, error) {
	inv, err := discovery.Discover(lib)
	if err != nil {
		return nil, err
	}
	if err := discovery.ReadMIGGeometry(lib, inv); err != nil {
		return nil, err
	}
	g, ok := inv.GPUByUUID(uuid)
	if !ok {
		return nil, fmt.Errorf("GPU %s is gone", uuid)
	}
	return g.MIGGeometry, nil
}

// discovered reports whether discovery lists d at its placement.
func discovered(lib nvml.Interface, gpu string, d migctl.Device) bool {
	inv, err := discovery.Discover(lib)
	if err != nil || discovery.ReadMIGGeometry(lib, inv) != nil {
		return false
	}
	g, ok := inv.GPUByUUID(gpu)
	if !ok {
		return false
	}
	for _, m := range g.MIGDevices {
		if m.UUID == d.UUID && m.Placement != nil && *m.Placement == d.Placement {
			return true
		}
	}
	return false
}

// Probe names, as TestMIGCheckReport reads them.
const (
	ProbeOccupied     = "a 2g instance over a 3g's placement"
	ProbeNotOffered   = "a 3g instance at memory slice 2"
	ProbeSecondME     = "a second +me instance"
	ProbeDestroyInUse = "destroying a GPU instance before its compute instance"
)

// probe asks NVML for what it must refuse and records its answers; it
// returns the devices still made, for the caller's cleanup.
func probe(lib nvml.Interface, gpu string, geo *discovery.MIGGeometry, made []migctl.Device) ([]Probe, []migctl.Device, error) {
	h, ret := lib.DeviceGetHandleByUUID(gpu)
	if ret != nvml.SUCCESS {
		return nil, made, fmt.Errorf("GPU handle: %s", ret.Error())
	}
	byID := func(id uint32) *migplace.Profile { p, _ := geo.ProfileByID(id); return p }
	p3g, p2g, pme := byID(9), byID(14), byID(20)
	if p3g == nil || p2g == nil || pme == nil {
		return nil, made, nil // not the classic profiles: nothing to compare
	}
	var out []Probe
	create := func(p *migplace.Profile, start int) (migctl.Device, error) {
		pl, _ := p.PlacementAt(start)
		ci, _ := p.FullComputeInstance()
		d, _, err := migctl.Ensure(lib, migplace.Target{GPUUUID: gpu, Profile: p.Name, ProfileEnum: p.Enum, ProfileID: p.ID, Placement: pl, ComputeInstanceProfile: ci})
		if err == nil {
			made = append(made, d)
		}
		return d, err
	}
	raw := func(what string, p *migplace.Profile, pl migplace.Placement) {
		info, _ := h.GetGpuInstanceProfileInfo(p.Enum)
		npl := pl.NVML()
		gi, ret := h.CreateGpuInstanceWithPlacement(&info, &npl)
		if ret == nvml.SUCCESS {
			_ = gi.Destroy()
		}
		out = append(out, Probe{What: what, Got: ret.Error()})
	}
	d3g, err := create(p3g, 4)
	if err != nil {
		return out, made, fmt.Errorf("probe setup: %w", err)
	}
	raw(ProbeOccupied, p2g, migplace.Placement{Start: 4, Size: 2})
	raw(ProbeNotOffered, p3g, migplace.Placement{Start: 2, Size: 4})
	if _, err := create(pme, 0); err != nil {
		return out, made, fmt.Errorf("probe setup: %w", err)
	}
	raw(ProbeSecondME, pme, migplace.Placement{Start: 1, Size: 1})
	if gi, ret := h.GetGpuInstanceById(d3g.GPUInstanceID); ret == nvml.SUCCESS {
		out = append(out, Probe{What: ProbeDestroyInUse, Got: gi.Destroy().Error()})
	}
	return out, made, nil
}

// ms is a duration in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
