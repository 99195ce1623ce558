package fakenode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Spec is a fake node file: the YAML format Parse and Load read. See the
// package documentation for an example.
type Spec struct {
	// Name is the node name; it also seeds the GPU and MIG device UUIDs.
	Name string `json:"name"`
	// DriverVersion is the driver version NVML reports, e.g. "570.86.15".
	DriverVersion string `json:"driverVersion"`
	// CUDAVersion is the CUDA version the driver supports, "major.minor".
	CUDAVersion string `json:"cudaVersion"`
	// GPUs are the GPU entries; an entry with Count n stands for n GPUs.
	// GPU indexes follow the order of the entries.
	GPUs []GPUSpec `json:"gpus"`
	// NVLink are groups of GPUs connected by NVLink.
	NVLink []NVLinkSpec `json:"nvlink,omitempty"`
	// PCIe are groups of GPUs that share a PCIe ancestor nearer than their
	// NUMA node.
	PCIe []PCIeSpec `json:"pcie,omitempty"`
	// VFIO are GPUs bound to vfio-pci for virtual machines, which NVML does
	// not see; they follow the GPUs on the PCI bus (vfio.go).
	VFIO []VFIOSpec `json:"vfio,omitempty"`
}

// GPUSpec is one entry of Spec.GPUs.
type GPUSpec struct {
	// Product is a catalog key, e.g. "A100-SXM4-40GB".
	Product string `json:"product"`
	// Count repeats the entry (default 1).
	Count *int `json:"count,omitempty"`
	// NUMA is the GPU's NUMA node (default 0; -1: NVML does not report one).
	NUMA *int `json:"numa,omitempty"`
	// MIG is the MIG layout. MIG mode is enabled when the file has a mig
	// key, even an empty one.
	MIG []MIGSpec `json:"mig,omitempty"`
	// Health is the evidence of past failures NVML keeps across processes.
	Health *HealthSpec `json:"health,omitempty"`
	// Mode is the GPU's PCI class: compute (default, a 3D controller) or
	// graphics (a VGA controller), what gpu.mode labels (mode.go).
	Mode string `json:"mode,omitempty"`
	// Fabric attaches the GPU to an NVLink multi-node fabric (mode.go).
	Fabric *FabricSpec `json:"fabric,omitempty"`
	// MIGEnabled is set when the entry has a mig key.
	MIGEnabled bool `json:"-"`
}

// UnmarshalJSON decodes a GPU entry and records whether it has a mig key.
func (g *GPUSpec) UnmarshalJSON(data []byte) error {
	type plain GPUSpec
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return err
	}
	if err := json.Unmarshal(data, (*plain)(g)); err != nil {
		return err
	}
	_, g.MIGEnabled = keys["mig"]
	return nil
}

// HealthSpec is what NVML reports about a GPU's past memory failures: the
// evidence the driver keeps across processes (until the GPU is reset), which
// the health watcher reads at start-up.
type HealthSpec struct {
	// RetiredPagesPending: pages were retired and await a GPU reset
	// (nvmlDeviceGetRetiredPagesPendingStatus answers FEATURE_ENABLED).
	// Only products with page retirement (L4, L40S).
	RetiredPagesPending bool `json:"retiredPagesPending,omitempty"`
	// RowRemapPending: rows were remapped and await a GPU reset
	// (nvmlDeviceGetRemappedRows: isPending). Only products with row
	// remapping (A100, H100, H200, B200).
	RowRemapPending bool `json:"rowRemapPending,omitempty"`
	// RowRemapFailed: a row remapping failed (nvmlDeviceGetRemappedRows:
	// failureOccurred). Only products with row remapping.
	RowRemapFailed bool `json:"rowRemapFailed,omitempty"`
	// VolatileDoubleBitErrors is the volatile (since the last driver load)
	// uncorrectable ECC error count (nvmlDeviceGetTotalEccErrors with
	// MEMORY_ERROR_TYPE_UNCORRECTED, VOLATILE_ECC).
	VolatileDoubleBitErrors *int `json:"volatileDoubleBitErrors,omitempty"`
	// RecoveryAction is the GPU's recovery action, what the driver asks
	// for after an error (FI_DEV_GET_GPU_RECOVERY_ACTION): none (default),
	// gpu-reset, node-reboot, drain-p2p, drain-and-reset,
	// recover-imex-domain, bus-reset or system-reboot.
	RecoveryAction string `json:"recoveryAction,omitempty"`
}

// MIGSpec is one GPU instance (or Count identical ones) of a MIG layout.
type MIGSpec struct {
	// Profile is the GPU instance profile, e.g. "3g.20gb" or "1g.5gb+me".
	Profile string `json:"profile"`
	// Count repeats the entry (default 1).
	Count *int `json:"count,omitempty"`
	// Placement is the memory slice the instance starts at; by default the
	// fake picks one that makes the whole layout fit.
	Placement *int `json:"placement,omitempty"`
	// ComputeInstances are the sizes, in compute slices, of the compute
	// instances (MIG devices) inside the GPU instance. By default there is
	// one that fills it.
	ComputeInstances []int `json:"computeInstances,omitempty"`
}

// NVLinkSpec is a group of GPUs of which every pair is connected by Links
// NVLink lanes.
type NVLinkSpec struct {
	// GPUs are GPU indexes.
	GPUs []int `json:"gpus"`
	// Links is the number of lanes between every pair of the group.
	Links int `json:"links"`
	// NVSwitch connects the group through its own NVSwitch chips: each GPU
	// spends Links lanes in all (as on DGX/HGX baseboards) instead of Links
	// lanes per peer.
	NVSwitch bool `json:"nvswitch,omitempty"`
}

// PCIeSpec is a group of GPUs whose common PCIe ancestor is Level.
type PCIeSpec struct {
	// GPUs are GPU indexes.
	GPUs []int `json:"gpus"`
	// Level is nvidia-smi's name of the common ancestor: PIX, PXB, PHB,
	// NODE or SYS.
	Level string `json:"level"`
}

// SpecError is a problem with one field of a fake node file.
type SpecError struct {
	// Source names the file.
	Source string
	// Field is the field path, e.g. "gpus[0].mig[1].profile"; empty when
	// the problem concerns the whole file.
	Field string
	// Problem says what is wrong, quoting the offending value.
	Problem string
}

// Error formats the problem as "source: field: problem".
func (e *SpecError) Error() string {
	if e.Field == "" {
		return e.Source + ": " + e.Problem
	}
	return e.Source + ": " + e.Field + ": " + e.Problem
}

// decodeSpec reads YAML into a Spec, rejecting unknown fields and values of
// the wrong type with the field path.
func decodeSpec(source string, data []byte) (*Spec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &SpecError{Source: source, Problem: "the file is empty"}
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, &SpecError{Source: source, Problem: "not valid YAML: " + strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, &SpecError{Source: source, Problem: "not valid YAML: " + err.Error()}
	}
	if err := checkShape(generic, reflect.TypeFor[Spec](), ""); err != nil {
		var se *SpecError
		if errors.As(err, &se) {
			se.Source = source
		}
		return nil, err
	}
	var spec Spec
	if err := json.Unmarshal(js, &spec); err != nil {
		return nil, &SpecError{Source: source, Problem: err.Error()}
	}
	return &spec, nil
}

// checkShape walks a decoded JSON value alongside the Go type it will be
// decoded into, and reports the first unknown field or wrong type with its
// path.
func checkShape(v any, t reflect.Type, path string) error {
	if v == nil {
		return nil // null: the zero value
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkShape(v, t.Elem(), path)
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return shapeError(path, "a mapping", v)
		}
		fields := jsonFields(t)
		for _, key := range slices.Sorted(maps.Keys(m)) {
			sub := joinPath(path, key)
			ft, ok := fields[key]
			if !ok {
				return &SpecError{Field: sub, Problem: fmt.Sprintf("unknown field (known: %s)", strings.Join(slices.Sorted(maps.Keys(fields)), ", "))}
			}
			if err := checkShape(m[key], ft, sub); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return shapeError(path, "a list", v)
		}
		for i, e := range list {
			if err := checkShape(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.String:
		if _, ok := v.(string); !ok {
			return shapeError(path, "a string", v)
		}
		return nil
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return shapeError(path, "true or false", v)
		}
		return nil
	case reflect.Int:
		n, ok := v.(json.Number)
		if !ok {
			return shapeError(path, "an integer", v)
		}
		if _, err := strconv.ParseInt(n.String(), 10, 32); err != nil {
			return shapeError(path, "an integer", v)
		}
		return nil
	}
	return fmt.Errorf("fakenode: no shape check for %s", t)
}

// jsonFields maps the JSON names of a struct's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

func shapeError(path, want string, got any) error {
	return &SpecError{Field: path, Problem: fmt.Sprintf("must be %s, not %s", want, describe(got))}
}

// describe names a decoded JSON value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return strconv.FormatBool(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%v", v)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
