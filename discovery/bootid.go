package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"os"
)

// BootIDPath is where Linux gives the current boot's random ID, which a
// reboot changes: until-reboot holds compare it (HealthHold.Ended).
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// ReadBootID reads the boot ID from path (BootIDPath on a node; tests pass
// a file of their own). An empty file is an error: an unknown boot must not
// look like a new one.
func ReadBootID(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the boot ID: %w", err)
	}
	id := string(bytes.TrimSpace(data))
	if id == "" {
		return "", errors.New("reading the boot ID: " + path + " is empty")
	}
	return id, nil
}
