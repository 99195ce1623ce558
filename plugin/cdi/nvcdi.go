//go:build !nonvcdi

package cdi

import (
	"fmt"
	"log/slog"

	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// NVCDI finds the container edits with NVIDIA's container toolkit library
// (nvcdi, the code behind nvidia-ctk cdi generate) over the real NVML and
// driver root: device nodes (with their MIG capabilities and DRM nodes),
// libraries, tools, firmware and the nvidia-cdi-hook hooks
// (create-symlinks, update-ldcache, ...), exactly as NVIDIA's own specs.
// nvcdi reads MIG capabilities from the host's /proc and wants character
// devices, so it does not work on the fake node; Root does there.
type NVCDI struct {
	lib nvcdi.Interface
	// toHost maps the agent's view of the driver root to the host's.
	toHost transform.Transformer
}

var _ Generator = (*NVCDI)(nil)

// NewNVCDI returns a generator over nvcdi in its NVML mode.
func NewNVCDI(o NVCDIOptions) (*NVCDI, error) {
	if o.NVML == nil {
		return nil, fmt.Errorf("nvcdi: no NVML")
	}
	if o.DriverRoot == "" {
		o.DriverRoot = "/"
	}
	if o.DevRoot == "" {
		o.DevRoot = o.DriverRoot
	}
	if o.HostDriverRoot == "" {
		o.HostDriverRoot = o.DriverRoot
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	opts := []nvcdi.Option{
		nvcdi.WithNvmlLib(o.NVML),
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithDriverRoot(o.DriverRoot),
		nvcdi.WithDevRoot(o.DevRoot),
		nvcdi.WithLogger(slogAdapter{o.Logger}),
	}
	if o.HookPath != "" {
		opts = append(opts, nvcdi.WithNVIDIACDIHookPath(o.HookPath))
	}
	lib, err := nvcdi.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nvcdi: %w", err)
	}
	toHost := transformroot.NewDriverTransformer(
		transformroot.WithDriverRoot(o.DriverRoot), transformroot.WithTargetDriverRoot(o.HostDriverRoot),
		transformroot.WithDevRoot(o.DevRoot), transformroot.WithTargetDevRoot(o.HostDriverRoot),
	)
	return &NVCDI{lib: lib, toHost: toHost}, nil
}

// Edits implements Generator: nvcdi's common edits, and each device's
// edits looked up by UUID, with host paths as the host sees them.
func (g *NVCDI) Edits(_ *discovery.Inventory, devs []plan.Device) (Edits, error) {
	common, err := g.lib.GetCommonEdits()
	if err != nil {
		return Edits{}, fmt.Errorf("nvcdi: common edits: %w", err)
	}
	out := Edits{Devices: make(map[string]specs.ContainerEdits, len(devs))}
	if common != nil && common.ContainerEdits != nil {
		out.Common = *common.ContainerEdits
	}
	for _, d := range devs {
		ds, err := g.lib.GetDeviceSpecsByID(d.ID)
		if err != nil {
			return Edits{}, fmt.Errorf("nvcdi: device %s: %w", d.ID, err)
		}
		if len(ds) == 0 {
			return Edits{}, fmt.Errorf("nvcdi: device %s: no device spec", d.ID)
		}
		out.Devices[d.ID] = ds[0].ContainerEdits
	}
	// The transformer works on a spec: one holding every device's edits.
	spec := &specs.Spec{ContainerEdits: out.Common}
	for _, d := range devs {
		spec.Devices = append(spec.Devices, specs.Device{Name: d.ID, ContainerEdits: out.Devices[d.ID]})
	}
	if err := g.toHost.Transform(spec); err != nil {
		return Edits{}, fmt.Errorf("nvcdi: host paths: %w", err)
	}
	out.Common = spec.ContainerEdits
	for _, d := range spec.Devices {
		out.Devices[d.Name] = d.ContainerEdits
	}
	return out, nil
}

// slogAdapter passes nvcdi's logrus-style messages to slog; nvcdi warns
// about every optional file it does not find, so its warnings are Debug.
type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Debugf(f string, args ...any)   { a.log.Debug(fmt.Sprintf(f, args...)) }
func (a slogAdapter) Tracef(f string, args ...any)   { a.log.Debug(fmt.Sprintf(f, args...)) }
func (a slogAdapter) Infof(f string, args ...any)    { a.log.Debug(fmt.Sprintf(f, args...)) }
func (a slogAdapter) Warningf(f string, args ...any) { a.log.Debug(fmt.Sprintf(f, args...)) }
func (a slogAdapter) Errorf(f string, args ...any)   { a.log.Error(fmt.Sprintf(f, args...)) }

// NewNVCDIGenerator returns the Generator of real GPUs: nvcdi. A binary
// built with -tags nonvcdi leaves nvcdi (and its dependencies) out, and
// fails here instead (nonvcdi.go).
func NewNVCDIGenerator(o NVCDIOptions) (Generator, error) { return NewNVCDI(o) }
