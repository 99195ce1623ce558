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

// TestCheckDynamicMIG checks a rule that partitions GPUs on demand against
// the whole catalog: a profile none of the matched products has is an
// error naming the rule, field and value; the catalog's profiles pass.
func TestCheckDynamicMIG(t *testing.T) {
	const head = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"
	bad, err := rules.Parse("r.yaml", []byte(head+`- name: b200
  devices: gpu
  matchFeatures:
    - feature: nvidia.gpu
      matchExpressions:
        product: {op: In, value: ["NVIDIA B200"]}
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "-" }}'
  mig: {partition: dynamic, profiles: [1g.23gb+me, 7g.192gb]}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = Check(bad)
	if err == nil || !strings.Contains(err.Error(), `rules[0] "b200": mig.profiles[1]: is a MIG profile of none of the catalog GPUs the rule matches (NVIDIA B200: `) ||
		!strings.Contains(err.Error(), `the same slice count there: NVIDIA B200 7g.180gb (have "7g.192gb")`) {
		t.Errorf("%v", err)
	}
	good, err := rules.Parse("r.yaml", []byte(head+`- name: all
  devices: gpu
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "-" }}'
  mig: {partition: dynamic, wholeGPU: nvidia.com/gpu}
- name: rest
  devices: gpu
  resource: nvidia.com/gpu
  serve: dra
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(good); err != nil {
		t.Errorf("a dynamic rule for every catalog GPU: %v", err)
	}
}

// TestCheckFindsConflictsOnMixedNodes: two rules give one resource with
// different sharing, one on MIG devices of a labelled node, the other on
// B200 GPUs. No catalog node holds both, but a node may (16 GPUs of two
// products, one of them in MIG mode), and run refuses its plan there; so
// check refuses the file, naming both rules and the labels; rules whose
// selectors keep them apart pass.
func TestCheckFindsConflictsOnMixedNodes(t *testing.T) {
	const head = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"
	conflict := head + `- name: r0
  devices: mig
  nodeSelector:
    matchLabels: {pool: p0}
  resource: nvidia.com/gpu
  sharing: {strategy: time-slicing, replicas: 64}
- name: r1
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      product: {op: InRegexp, value: ["B200"]}
  resource: nvidia.com/gpu
`
	rs, err := rules.Parse("mixed.yaml", []byte(conflict))
	if err != nil {
		t.Fatal(err)
	}
	err = Check(rs)
	if err == nil || !strings.Contains(err.Error(), `mixed.yaml:`) ||
		!strings.Contains(err.Error(), `on a node holding devices of several catalog nodes with node labels pool=p0: resource "nvidia.com/gpu" of`) ||
		!strings.Contains(err.Error(), `is also given by rules[0] "r0" with sharing time-slicing x64; a resource has one sharing`) {
		t.Errorf("check: %v", err)
	}
	apart := strings.Replace(conflict, "- name: r1\n  devices: gpu\n", "- name: r1\n  devices: gpu\n  nodeSelector:\n    matchLabels: {pool: p1}\n", 1)
	if rs, err = rules.Parse("apart.yaml", []byte(apart)); err != nil {
		t.Fatal(err)
	}
	if err := Check(rs); err != nil {
		t.Errorf("rules on pools p0 and p1 cannot meet on a node, but check says %v", err)
	}
}
