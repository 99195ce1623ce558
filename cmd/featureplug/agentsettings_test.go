package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// nvidiaVolumeMounts is an NVIDIA device-plugin config for nodes where
// the toolkit takes the device list only as volume mounts, with devices
// named by index: pods get no GPU if either is dropped.
const nvidiaVolumeMounts = `version: v1
flags:
  migStrategy: none
  plugin:
    deviceListStrategy: volume-mounts
    deviceIDStrategy: index
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
`

// TestRunHonoursNVIDIAConfigFlags: an NVIDIA config given as --rules sets
// the agent's device-list and device-ID strategies, as NVIDIA's plugin
// would use them; a flag that says otherwise is an error naming both; and
// a later file that changes them is refused while the first keeps serving.
func TestRunHonoursNVIDIAConfigFlags(t *testing.T) {
	rulesFile := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, rulesFile, nvidiaVolumeMounts)

	_, _, code, err := executeRoot(t, "run", "--fake-node", "workstation", "--publish", "none", "--rules", rulesFile, "--device-id-strategy", "uuid")
	if code != exitUsage || err == nil || !strings.Contains(err.Error(), "--device-id-strategy=uuid (from the command line or $FEATUREPLUG_DEVICE_ID_STRATEGY) conflicts with flags.plugin.deviceIDStrategy \"index\"") {
		t.Errorf("a conflicting flag: exit %d, %v", code, err)
	}

	dir := kubeletsim.ShortTempDir(t)
	k := startKubelet(t, dir)
	// The same value as a flag is no conflict.
	p := startAgent(t, "--fake-node", "workstation", "--publish", "none", "--kubelet-dir", dir, "--rules", rulesFile,
		"--device-id-strategy", "index", "--file-check-interval", "50ms")
	eventually(t, "the GPU is served twice", func() bool { total, _ := k.Capacity("nvidia.com/gpu"); return total == 2 })
	resp, err := k.Allocate(context.Background(), "nvidia.com/gpu", []string{k.Devices("nvidia.com/gpu")[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Mounts) != 1 || resp.Mounts[0].ContainerPath != "/var/run/nvidia-container-devices/0" {
		t.Errorf("Allocate mounts %v, want the device list as a volume mount of index 0", resp.Mounts)
	}
	if v, ok := resp.Envs["NVIDIA_VISIBLE_DEVICES"]; ok && v != "/var/run/nvidia-container-devices" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q: the device list went into the environment", v)
	}

	// A new file that would switch the strategy is refused: the agent
	// applies these flags at start.
	writeFile(t, rulesFile, strings.Replace(nvidiaVolumeMounts, "deviceIDStrategy: index", "deviceIDStrategy: uuid", 1))
	eventually(t, "the reload is refused", func() bool {
		return p.metric("featureplug_rule_reloads_total", `result="invalid"`) >= 1
	})
	if !strings.Contains(p.logs.String(), "flags.plugin.deviceIDStrategy \\\"uuid\\\" (--device-id-strategy=uuid) differs from the agent's --device-id-strategy=index") {
		t.Errorf("the log does not say why the reload was refused:\n%s", p.logs.String())
	}
	if total, _ := k.Capacity("nvidia.com/gpu"); total != 2 {
		t.Errorf("capacity %d after the refused reload, want the last good 2", total)
	}
}
