package labeler

import (
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules"
)

// TestGoldenBundledNodes pins the labels of every bundled fake node, read
// through the real discovery code path, without rules and with the
// built-in "mixed" rules (whole GPUs as nvidia.com/gpu, MIG devices as
// nvidia.com/mig-<profile>).
func TestGoldenBundledNodes(t *testing.T) {
	names := fakenode.BundledNames()
	if len(names) == 0 {
		t.Fatal("no bundled fake nodes")
	}
	mixed, err := rules.Load("mixed")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			node, err := fakenode.Named(name)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := discovery.Discover(node.NVML())
			if err != nil {
				t.Fatalf("Discover(%s): %v", name, err)
			}
			if node.VFIOCount() > 0 {
				dir := t.TempDir()
				if err := node.WriteSysfs(dir); err != nil {
					t.Fatal(err)
				}
				if inv.VFIO, err = discovery.DiscoverVFIO(dir); err != nil {
					t.Fatal(err)
				}
			}
			plan, err := mixed.Plan(inv, nil)
			if err != nil {
				t.Fatalf("mixed rules on %s: %v", name, err)
			}
			checkGolden(t, "node-"+name+"-norules", Labels(inv, nil, LabelOptions{}))
			checkGolden(t, "node-"+name+"-mixed", Labels(inv, plan, LabelOptions{}))
		})
	}
}
