package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/featureplug/featureplug/test/harness"
)

// TestFault17CDISpecDeleted: the CDI spec directory removed, or the spec
// edited, behind the agent's back (a cleanup script, another generator, a
// tmpfs remount) while nothing else changes: the agent writes its spec
// again at the next periodic re-discovery, so the CDI names Allocate
// returns resolve again; it logs a warning and counts
// featureplug_cdi_spec_restores_total.
func TestFault17CDISpecDeleted(t *testing.T) {
	dir := shortTempDir(t)
	specDir := filepath.Join(dir, "cdi")
	driverRoot := filepath.Join(dir, "driver")
	nodeFile := copyFile(t, bundledFakeNode("a100-80gb-mixed"), dir, "node.yaml")
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(cdiRules), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	a := startAgent(t, agentSpec{
		Node:       "cdi-fault",
		FakeNode:   nodeFile,
		Rules:      rulesFile,
		KubeletDir: kubeletDir,
		Extra: []string{
			"--device-list-strategy", "cdi-cri",
			"--cdi-kind", cdiKind,
			"--cdi-spec-dir", specDir,
			"--driver-root", driverRoot,
			"--rediscover-interval", "300ms",
		},
	})
	devs := cdiDiscover(t, nodeFile)
	waitCapacities(t, peer, map[string]int64{cdiGPUResource: 1})
	cdiWaitSpec(t, specDir, devs, func(_, res string) bool { return res != "" })
	path := filepath.Join(specDir, "featureplug-nvidia.com_gpu.yaml")

	// The directory goes.
	if err := os.RemoveAll(specDir); err != nil {
		t.Fatal(err)
	}
	a.waitMetric(t, "featureplug_cdi_spec_restores_total", func(v float64) bool { return v >= 1 })
	cdiWaitSpec(t, specDir, devs, func(_, res string) bool { return res != "" })
	agentFaultWaitLog(t, a, "CDI spec was removed or changed", path)
	cdiCheckAllocation(t, peer, specDir, driverRoot, cdiGPUResource, 1, devs)

	// The file is emptied of devices by someone else.
	if err := os.WriteFile(path, []byte("cdiVersion: 0.5.0\nkind: "+cdiKind+"\ndevices: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.waitMetric(t, "featureplug_cdi_spec_restores_total", func(v float64) bool { return v >= 2 })
	cdiWaitSpec(t, specDir, devs, func(_, res string) bool { return res != "" })
	cdiCheckAllocation(t, peer, specDir, driverRoot, cdiGPUResource, 1, devs)
}
