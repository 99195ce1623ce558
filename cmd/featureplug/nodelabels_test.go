package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// perNodeConfigs is NVIDIA's per-node configs as a ConfigMap: nodes
// labelled nvidia.com/device-plugin.config=sliced share each GPU 8 ways,
// the others not at all.
const perNodeConfigs = `apiVersion: v1
kind: ConfigMap
metadata: {name: plugin-configs}
data:
  whole: |
    version: v1
    flags: {migStrategy: none}
  sliced: |
    version: v1
    flags: {migStrategy: none}
    sharing:
      timeSlicing:
        resources:
        - name: nvidia.com/gpu
          replicas: 8
`

// TestPreviewsEqualWhatRunPublishes: for a node with labels that pick a
// per-node config, discover -o labels --node-labels prints the labels run
// publishes, and rules explain --node-labels the resources run serves.
func TestPreviewsEqualWhatRunPublishes(t *testing.T) {
	rulesFile := filepath.Join(t.TempDir(), "configs.yaml")
	writeFile(t, rulesFile, perNodeConfigs)
	const labels = "nvidia.com/device-plugin.config=sliced"

	dir := kubeletsim.ShortTempDir(t)
	k := startKubelet(t, dir)
	p := startAgent(t, "--fake-node", "l40s-pcie", "--publish", "stdout", "--kubelet-dir", dir, "--rules", rulesFile, "--node-labels", labels)
	eventually(t, "the sliced config is served", func() bool { total, _ := k.Capacity("nvidia.com/gpu"); return total == 32 })
	var published []string
	eventually(t, "the labels are published", func() bool {
		published = publishedLabels(p.logs.String())
		return slices.Contains(published, "nvidia.com/gpu.replicas=8")
	})

	out, errOut, code, err := executeRoot(t, "discover", "--fake-node", "l40s-pcie", "-o", "labels", "--rules", rulesFile, "--node-labels", labels)
	if code != 0 {
		t.Fatalf("discover: %v\n%s", err, errOut)
	}
	previewed := strings.Split(strings.TrimSpace(out), "\n")
	if !slices.Equal(previewed, published) {
		t.Errorf("discover -o labels --node-labels %s prints\n%s\nrun publishes\n%s", labels, strings.Join(previewed, "\n"), strings.Join(published, "\n"))
	}

	out, errOut, code, err = executeRoot(t, "rules", "explain", "--fake-node", "l40s-pcie", "-o", "json", "--rules", rulesFile, "--node-labels", labels)
	if code != 0 {
		t.Fatalf("explain: %v\n%s", err, errOut)
	}
	var doc struct {
		Resources []struct {
			Name    string
			Devices []json.RawMessage
			Sharing struct{ Replicas int }
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Resources {
		served, _ := k.Capacity(r.Name)
		if explained := len(r.Devices) * max(r.Sharing.Replicas, 1); explained != served {
			t.Errorf("%s: explain gives %d devices, run serves %d", r.Name, explained, served)
		}
	}
	if len(doc.Resources) != 1 {
		t.Errorf("explain gives %d resources, run serves nvidia.com/gpu only", len(doc.Resources))
	}
}

// publishedLabels returns the label lines run --publish stdout printed
// among its logs, sorted and without repeats.
func publishedLabels(output string) []string {
	var out []string
	for _, line := range strings.Split(output, "\n") {
		if strings.HasPrefix(line, "time=") || !strings.Contains(line, "=") || !strings.Contains(line, "/") {
			continue
		}
		if !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	slices.Sort(out)
	return out
}
