package discovery_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
)

// TestSetComputeMode sets EXCLUSIVE_PROCESS on a fake GPU and back, checks
// that discovery reads the mode the fake recorded, and that a refusal for
// lack of privilege is ErrComputeModeDenied and changes nothing.
func TestSetComputeMode(t *testing.T) {
	node, inv := discoverNode(t, "dgx-h100")
	lib := node.NVML()
	uuid := inv.GPUs[1].UUID
	if got := inv.GPUs[1].ComputeMode; got != "Default" {
		t.Fatalf("initial compute mode = %q, want Default", got)
	}

	prev, err := discovery.SetComputeMode(lib, uuid, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
	if err != nil || prev != nvml.COMPUTEMODE_DEFAULT {
		t.Fatalf("SetComputeMode(EXCLUSIVE_PROCESS) = %v, %v; want DEFAULT, nil", prev, err)
	}
	if m, _ := node.ComputeMode(1); m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("fake GPU 1 mode = %v, want EXCLUSIVE_PROCESS", m)
	}
	if m, _ := node.ComputeMode(0); m != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("fake GPU 0 mode = %v, want DEFAULT (untouched)", m)
	}
	again, err := discovery.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.GPUs[1].ComputeMode; got != "ExclusiveProcess" {
		t.Errorf("discovered compute mode = %q, want ExclusiveProcess", got)
	}
	// Setting the mode a GPU has reports it as the previous mode.
	if prev, err := discovery.SetComputeMode(lib, uuid, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); err != nil || prev != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("SetComputeMode again = %v, %v; want EXCLUSIVE_PROCESS, nil", prev, err)
	}

	node.DenyComputeMode(true)
	_, err = discovery.SetComputeMode(lib, uuid, nvml.COMPUTEMODE_DEFAULT)
	if !errors.Is(err, discovery.ErrComputeModeDenied) || !strings.Contains(err.Error(), uuid) || !strings.Contains(err.Error(), "Default") {
		t.Errorf("denied SetComputeMode = %v, want ErrComputeModeDenied naming %s and the mode", err, uuid)
	}
	if m, _ := node.ComputeMode(1); m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("after a denied change, mode = %v, want EXCLUSIVE_PROCESS", m)
	}
	node.DenyComputeMode(false)
	if prev, err := discovery.SetComputeMode(lib, uuid, nvml.COMPUTEMODE_DEFAULT); err != nil || prev != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("restore = %v, %v; want EXCLUSIVE_PROCESS, nil", prev, err)
	}
	if _, err := discovery.SetComputeMode(lib, "GPU-nope", nvml.COMPUTEMODE_DEFAULT); err == nil || !strings.Contains(err.Error(), "GPU-nope") {
		t.Errorf("unknown GPU: %v, want an error naming it", err)
	}
}
