package labeler

import (
	"fmt"
	"os"
	"strings"
)

// DefaultMachineTypeFile is where Linux exposes the DMI product name, which
// gpu-feature-discovery publishes as nvidia.com/gpu.machine.
const DefaultMachineTypeFile = "/sys/class/dmi/id/product_name"

// MachineType reads the machine type (e.g. "DGX A100") from a DMI product
// name file, for LabelOptions.Machine. Labels sanitizes it ("DGX-A100").
func MachineType(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read machine type: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}
