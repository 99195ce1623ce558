package catalog

import (
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules"
)

// TestNodesCoverCatalog checks that the nodes hold every catalog product
// and every MIG profile, +me profiles included.
func TestNodesCoverCatalog(t *testing.T) {
	nodes, err := Nodes()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		for _, g := range n.Inventory.GPUs {
			seen[g.Product] = true
			for _, m := range g.MIGDevices {
				seen[g.Product+" "+m.Profile] = true
			}
		}
	}
	me := 0
	for _, p := range fakenode.Products() {
		if !seen[p.Name] {
			t.Errorf("product %s (%s) is on no node", p.Key, p.Name)
		}
		for _, prof := range p.MIGProfiles {
			if !seen[p.Name+" "+prof.Name] {
				t.Errorf("product %s MIG profile %s is on no node", p.Key, prof.Name)
			}
			if strings.HasSuffix(prof.Name, "+me") {
				me++
			}
		}
	}
	if me == 0 {
		t.Error("the catalog has no +me profile to check")
	}
}

// TestCheckFindsInvalidNames checks that a template giving an invalid name
// on one MIG profile is an error naming the rule, the device and the name,
// and that files valid on every device pass.
func TestCheckFindsInvalidNames(t *testing.T) {
	for _, tc := range []struct {
		name, rules string
		want        []string // substrings of the error; none: valid
	}{
		{
			name: "profile with +me",
			rules: `- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile }}'`,
			want: []string{`rules[0] "mig"`, "resource", `"nvidia.com/mig-1g.10gb+me"`, "MIG 1g.10gb+me"},
		},
		{
			name: "product with spaces",
			rules: `- name: per-product
  devices: gpu
  resource: 'example.com/{{ .product }}'`,
			want: []string{`rules[0] "per-product"`, `"example.com/NVIDIA H100 80GB HBM3"`, "NVIDIA H100 80GB HBM3"},
		},
		{
			name: "sanitized",
			rules: `- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "." }}'
- name: per-product
  devices: gpu
  resource: 'example.com/{{ .product | resourceName }}'`,
		},
		{
			name: "replicas over the cap per resource on a bundled node",
			rules: `- name: shared
  devices: mig
  resource: nvidia.com/mig-shared
  sharing: {strategy: time-slicing, replicas: 1024}`,
			want: []string{`rules[0] "shared"`, "fake node", "plan.MaxDevicesPerResource"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := rules.Parse("test.yaml", []byte("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"+tc.rules+"\n"))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = Check(rs)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check passed, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestBuiltinsPass checks that every builtin rules file passes the check.
func TestBuiltinsPass(t *testing.T) {
	nodes, err := Nodes()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range rules.BuiltinNames() {
		rs, err := rules.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.CheckNodes(nodes); err != nil {
			t.Errorf("builtin %s: %v", name, err)
		}
	}
}

// BenchmarkCheck measures a whole catalog check of the per-model builtin,
// building the nodes included (what `rules check` does per run).
func BenchmarkCheck(b *testing.B) {
	rs, err := rules.Load("per-model")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := Check(rs); err != nil {
			b.Fatal(err)
		}
	}
}
