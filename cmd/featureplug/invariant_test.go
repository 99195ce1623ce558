package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/cmd/internal/rulesengine"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/plan"
)

// The check/run invariant, one verdict for `rules check` and `run`:
//
//   - on a node (`rules check --fake-node`, CheckOn), check refuses a file
//     exactly when run would refuse its plan there, leave a device out, or
//     withdraw every resource, with run's own message, and passes the plan
//     run serves;
//   - on no node (`rules check`, CheckNodes on the catalog), whatever check
//     accepts, run serves in full on every node the catalog can make (the
//     bundled fake nodes and random nodes of up to 16 GPUs of any product
//     and MIG layout) under any node labels: the planner accepts it without
//     problems, the plugin manager accepts the plan, and every plan is
//     within the caps on device IDs (which bound the memory the device
//     plugins allocate);
//   - a file with no rules is refused at load by both, unless it says
//     serveNothing.
//
// The generator writes random rules files over the feature names
// featureplug publishes, with templates that are valid on some devices
// and not on others, every sharing strategy with replicas from negative
// to huge, node selectors, and now and then no rules at all.

// invariantFeatures are real feature names and attributes, with values
// that match some devices of the fake nodes.
var invariantFeatures = []struct {
	feature, attr string
	values        []string
}{
	{discovery.FeatureGPU, discovery.AttrProduct, []string{"A100", "H100", "H200", "L4", "B200", "^NVIDIA"}},
	{discovery.FeatureGPU, discovery.AttrMemory, []string{"40960", "81920", "1000"}},
	{discovery.FeatureGPU, discovery.AttrFamily, []string{"ampere", "hopper", "ada-lovelace"}},
	{discovery.FeatureGPU, discovery.AttrMIGCapable, []string{"true", "false"}},
	{discovery.FeatureMIG, discovery.AttrProfile, []string{"1g.10gb", "1g.10gb+me", "3g.40gb", "+me", "7g"}},
	{discovery.FeatureMIG, discovery.AttrSlicesGI, []string{"1", "3", "7"}},
	{discovery.FeatureDriver, discovery.AttrDriverVersion, []string{"550", "570.86.15"}},
}

// invariantResources are resource fields: literal names and templates,
// some invalid on some devices (+me profiles, product names with spaces).
var invariantResources = []string{
	"nvidia.com/gpu",
	"example.com/shared",
	"nvidia.com/mig-{{ .profile }}",
	`nvidia.com/mig-{{ .profile | replace "+" "." }}`,
	"example.com/{{ .product }}",
	"example.com/{{ .product | resourceName }}",
	`example.com/{{ .parent_product | trimPrefix "NVIDIA " | resourceName }}-{{ .profile | resourceName }}`,
	"{{ .family }}.kubernetes.io/gpu",
	"example.com/{{ .family }}-{{ .memory }}",
	`example.com/{{ if eq .mig_capable "true" }}mig{{ else }}whole{{ end }}`,
	"example.com/{{ .no_such_attribute }}",
}

// invariantReplicas are replicas values, from invalid to huge.
var invariantReplicas = []string{"-5", "0", "1", "2", "7", "48", "64", "512", "1024", "1025", "100000", "1000000000", fmt.Sprint(math.MaxInt32), "9223372036854775807"}

// genRules writes a random rules file.
func genRules(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\n")
	n := 1 + r.IntN(4)
	if r.IntN(10) == 0 {
		n = 0
	}
	if (n == 0 && r.IntN(2) == 0) || r.IntN(40) == 0 {
		b.WriteString("serveNothing: true\n")
	}
	switch {
	case n > 0:
		b.WriteString("rules:\n")
	case r.IntN(3) == 0:
		b.WriteString("rules: []\n")
	case r.IntN(2) == 0:
		b.WriteString("rules:\n") // a file cut short
	}
	for i := range n {
		fmt.Fprintf(&b, "- name: r%d\n", i)
		devices := "gpu"
		if r.IntN(2) == 0 {
			devices = "mig"
		}
		fmt.Fprintf(&b, "  devices: %s\n", devices)
		if r.IntN(4) == 0 {
			fmt.Fprintf(&b, "  nodeSelector:\n    matchLabels: {pool: p%d}\n", r.IntN(2))
		}
		if k := r.IntN(3); k > 0 {
			b.WriteString("  matchFeatures:\n")
			for range k {
				f := invariantFeatures[r.IntN(len(invariantFeatures))]
				v := f.values[r.IntN(len(f.values))]
				op := []string{"In", "InRegexp", "Exists", "NotIn"}[r.IntN(4)]
				if op == "Exists" {
					fmt.Fprintf(&b, "  - feature: %s\n    matchExpressions:\n      %s: {op: Exists}\n", f.feature, f.attr)
					continue
				}
				fmt.Fprintf(&b, "  - feature: %s\n    matchExpressions:\n      %s: {op: %s, value: [%q]}\n", f.feature, f.attr, op, v)
			}
		}
		resource := invariantResources[r.IntN(len(invariantResources))]
		if r.IntN(3) == 0 { // a literal name more often, so that more files pass
			resource = invariantResources[r.IntN(2)]
		}
		fmt.Fprintf(&b, "  resource: '%s'\n", resource)
		switch r.IntN(4) {
		case 0:
		case 1:
			fmt.Fprintf(&b, "  sharing: {strategy: time-slicing, replicas: %s}\n", invariantReplicas[r.IntN(len(invariantReplicas))])
		case 2:
			fmt.Fprintf(&b, "  sharing: {strategy: mps, replicas: %s}\n", invariantReplicas[r.IntN(len(invariantReplicas))])
		case 3:
			fmt.Fprintf(&b, "  sharing: {strategy: none, replicas: %s}\n", invariantReplicas[r.IntN(len(invariantReplicas))])
		}
	}
	return b.String()
}

// invariantNodes holds the catalog's nodes, built once per test binary.
var invariantNodes = sync.OnceValues(catalog.Nodes)

// invariantLabels are the node-label sets the generator's selectors tell
// apart.
var invariantLabels = []map[string]string{nil, {"pool": "p0"}, {"pool": "p1"}}

// genNode writes a random fake node of 1 to fakenode.MaxGPUs GPUs: runs of
// GPUs of one catalog product, each whole or in a random MIG layout, and
// returns it as a CheckNode whose name carries the file, for failure
// messages (nil when the layout does not fit and the node is skipped).
func genNode(t *testing.T, r *rand.Rand, i int) *rules.CheckNode {
	products := fakenode.Products()
	spec := fakenode.Spec{Name: fmt.Sprintf("random-%d", i), DriverVersion: "570.86.15", CUDAVersion: "12.8"}
	left := 1 + r.IntN(fakenode.MaxGPUs)
	// A third of the nodes are the largest: MaxGPUs GPUs of one product,
	// in one layout, each GPU as full as its profile allows.
	largest := r.IntN(3) == 0
	if largest {
		left = fakenode.MaxGPUs
	}
	for left > 0 {
		p := products[r.IntN(len(products))]
		count := 1 + r.IntN(left)
		if largest {
			count = left
		}
		g := fakenode.GPUSpec{Product: p.Key, Count: &count}
		if len(p.MIGProfiles) > 0 && r.IntN(2) == 0 {
			prof := p.MIGProfiles[r.IntN(len(p.MIGProfiles))]
			inst := 1 + r.IntN(prof.MaxInstances)
			if largest {
				inst = prof.MaxInstances
			}
			size := prof.ComputeInstanceSizes[r.IntN(len(prof.ComputeInstanceSizes))]
			g.MIG = []fakenode.MIGSpec{{Profile: prof.Name, Count: &inst, ComputeInstances: []int{size}}}
		}
		spec.GPUs = append(spec.GPUs, g)
		left -= count
	}
	data, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	node, err := fakenode.Parse(spec.Name, data)
	if err != nil {
		return nil // a layout the GPU cannot hold
	}
	lib := node.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("initializing %s: %v", spec.Name, ret)
	}
	defer func() { _ = lib.Shutdown() }()
	inv, err := discovery.Discover(lib)
	if err != nil {
		t.Fatalf("discovering %s: %v", spec.Name, err)
	}
	return &rules.CheckNode{Name: "fake node " + spec.Name + "\n" + string(data), Inventory: inv}
}

// genNodes returns count random nodes (genNode) that keep accepts.
func genNodes(t *testing.T, r *rand.Rand, count int, keep func(*rules.CheckNode) bool) []*rules.CheckNode {
	var nodes []*rules.CheckNode
	for i := 0; len(nodes) < count; i++ {
		if n := genNode(t, r, i); n != nil && keep(n) {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// runVerdict is what `run` does with rules on a node: the plan it would
// serve in full, or why not (it refuses the plan, leaves devices out, or
// would withdraw every resource). The rules are loaded by the agent's own
// engine.
func runVerdict(t *testing.T, file string, inv *discovery.Inventory, labels map[string]string) (*plan.Plan, error) {
	t.Helper()
	rs, err := rulesengine.New().Parse("gen.yaml", []byte(file))
	if err != nil {
		return nil, err
	}
	p, err := rs.Plan(inv, labels)
	if err != nil {
		return nil, err
	}
	// What the agent refuses whole (a template that fails on a device),
	// then the devices it leaves out for what the node is.
	var errs []error
	if err := p.CheckTemplates(); err != nil {
		errs = append(errs, err)
	}
	for _, pr := range p.Problems {
		if !pr.Template {
			errs = append(errs, errors.New(pr.Message))
		}
	}
	if err := p.CheckServes(); err != nil {
		errs = append(errs, err)
	}
	if err := plan.ValidatePlan(p); err != nil {
		t.Fatalf("the planner made a plan ValidatePlan refuses: %v\n%s", err, file)
	}
	if len(errs) > 0 {
		return p, errors.Join(errs...)
	}
	m, err := deviceplugin.NewManager(deviceplugin.Options{KubeletDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(p); err != nil {
		t.Fatalf("the plugin manager refuses a plan the planner made: %v\n%s", err, file)
	}
	return p, nil
}

// checkInvariant checks the invariant on one rules file and the given
// nodes besides the catalog's; it returns whether `rules check` accepted
// the file.
func checkInvariant(t *testing.T, file string, extra []*rules.CheckNode) bool {
	t.Helper()
	nodes, err := invariantNodes()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Parse("gen.yaml", []byte(file))
	if _, runErr := rulesengine.New().Parse("gen.yaml", []byte(file)); (err == nil) != (runErr == nil) {
		t.Fatalf("check loads with %v, run with %v\n%s", err, runErr, file)
	}
	if err != nil {
		return false
	}
	if len(rs.RuleNames()) == 0 && !strings.Contains(file, "serveNothing: true") {
		t.Fatalf("a file without rules and without serveNothing loads\n%s", file)
	}
	accepted := rs.CheckNodes(nodes) == nil
	var onNodes []*rules.CheckNode
	for i := range nodes {
		if !nodes[i].Synthetic {
			onNodes = append(onNodes, &nodes[i])
		}
	}
	for _, n := range append(onNodes, extra...) {
		for _, labels := range invariantLabels {
			runPlan, runErr := runVerdict(t, file, n.Inventory, labels)
			checkPlan, checkErr := rs.CheckOn(n.Name, n.Inventory, labels)
			switch {
			case (runErr == nil) != (checkErr == nil):
				t.Fatalf("on %s with labels %v, run says %v, check on the node says %v\n%s", n.Name, labels, runErr, checkErr, file)
			case runPlan == nil && checkErr.Error() != runErr.Error():
				t.Fatalf("on %s with labels %v, check on the node refuses with %q, run with %q\n%s", n.Name, labels, checkErr, runErr, file)
			case runPlan != nil && !reflect.DeepEqual(runPlan, checkPlan):
				t.Fatalf("on %s with labels %v, check on the node plans otherwise than run\n%s", n.Name, labels, file)
			}
			if !accepted {
				continue
			}
			// Two verdicts depend on the node alone, and are for check on
			// that node to tell: a plan that serves nothing on a node the
			// rules do not aim at, and the single strategy refusing a node
			// whose MIG layout is not uniform (as NVIDIA's plugin does).
			// Anything else run would not serve, check on the catalog must
			// have refused.
			if runPlan == nil {
				t.Fatalf("on %s with labels %v, run refuses what rules check accepts: %v\n%s", n.Name, labels, runErr, file)
			}
			for _, pr := range runPlan.Problems {
				if runPlan.SingleInvalid == "" || !strings.HasPrefix(pr.Message, "MIG strategy single refuses this node") {
					t.Fatalf("on %s with labels %v, run leaves out a device of what rules check accepts: %s\n%s", n.Name, labels, pr, file)
				}
			}
			total := 0
			for i := range runPlan.Resources {
				total += runPlan.Resources[i].AdvertisedDevices()
			}
			if total > plan.MaxDevicesPerNode {
				t.Fatalf("on %s: %d device IDs, over the cap of %d\n%s", n.Name, total, plan.MaxDevicesPerNode, file)
			}
		}
	}
	return accepted
}

// TestCheckRunInvariant runs the invariant on a bounded number of random
// rules files, and checks that the generator makes files check accepts
// often enough for the test to mean something.
func TestCheckRunInvariant(t *testing.T) {
	iterations := 300
	if testing.Short() {
		iterations = 50
	}
	r := rand.New(rand.NewPCG(12, 2026))
	nodes := genNodes(t, r, 24, func(*rules.CheckNode) bool { return true })
	accepted := 0
	for i := range iterations {
		// Six random nodes a file, from a pool so that nodes are not
		// built for every file.
		extra := make([]*rules.CheckNode, 6)
		for j := range extra {
			extra[j] = nodes[(i*7+j*5)%len(nodes)]
		}
		if checkInvariant(t, genRules(r), extra) {
			accepted++
		}
	}
	t.Logf("%d of %d generated files accepted by rules check", accepted, iterations)
	if accepted < iterations/10 {
		t.Errorf("only %d of %d generated files were accepted: the generator tests too little", accepted, iterations)
	}
}

// capReplicas are replicas values about the caps: 8192 device IDs per
// resource are 16 whole GPUs x 512, 112 MIG devices (16 GPUs x 7) x 73,
// 32 (16 x 2 3g devices) x 256.
var capReplicas = []string{"2", "64", "73", "74", "128", "256", "257", "512", "513", "1024"}

// capMatches narrow a rule to some products or MIG profiles, so that a
// resource's devices are fewer than a node's.
var capMatches = map[string][]string{
	"gpu": {"", "nvidia.gpu: {product: {op: InRegexp, value: [\"H100\"]}}", "nvidia.gpu: {product: {op: InRegexp, value: [\"A100|L4\"]}}"},
	"mig": {"", "nvidia.mig: {profile: {op: InRegexp, value: [\"^3g\"]}}", "nvidia.mig: {profile: {op: In, value: [\"1g.10gb\", \"1g.10gb+me\", \"2g.20gb\"]}}",
		"nvidia.mig: {profile: {op: InRegexp, value: [\"\\\\+me$\"]}}"},
}

// genCapRules writes a rules file of one to three time-sliced rules with
// replicas about the caps, some giving one resource name together.
func genCapRules(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n")
	replicas := capReplicas[r.IntN(len(capReplicas))]
	for i := range 1 + r.IntN(3) {
		devices := []string{"gpu", "mig"}[r.IntN(2)]
		fmt.Fprintf(&b, "- name: r%d\n  devices: %s\n", i, devices)
		if m := capMatches[devices][r.IntN(len(capMatches[devices]))]; m != "" {
			feature, expr, _ := strings.Cut(m, ": ")
			fmt.Fprintf(&b, "  matchFeatures:\n  - feature: %s\n    matchExpressions: %s\n", feature, expr)
		}
		name := "example.com/" + devices
		if r.IntN(2) == 0 {
			name = fmt.Sprintf("example.com/r%d", i)
		}
		fmt.Fprintf(&b, "  resource: %s\n  sharing: {strategy: time-slicing, replicas: %s}\n", name, replicas)
	}
	return b.String()
}

// TestCheckRunInvariantCaps runs the invariant on files about the caps,
// against every random node of the pool (a third of them the largest a
// product makes), so that a cap check counted on too small a node fails.
func TestCheckRunInvariantCaps(t *testing.T) {
	iterations := 150
	if testing.Short() {
		iterations = 30
	}
	r := rand.New(rand.NewPCG(7, 2026))
	nodes := genNodes(t, r, 12, func(n *rules.CheckNode) bool { return len(n.Inventory.GPUs) == fakenode.MaxGPUs })
	accepted := 0
	for range iterations {
		if checkInvariant(t, genCapRules(r), nodes) {
			accepted++
		}
	}
	t.Logf("%d of %d generated files accepted by rules check", accepted, iterations)
	if accepted < iterations/5 || accepted > iterations*4/5 {
		t.Errorf("%d of %d generated files were accepted: the generator does not test the caps' edges", accepted, iterations)
	}
}

// TestCheckRejectsWhatRunWouldRefuse checks known examples on the
// generator's terms: huge replicas, invalid names, no rules, and replicas
// a 16-GPU node cannot take are refused by check, and check on the
// 16-GPU node refuses them as run does there.
func TestCheckRejectsWhatRunWouldRefuse(t *testing.T) {
	count := fakenode.MaxGPUs
	spec := fakenode.Spec{Name: "h100-16", DriverVersion: "570.86.15", CUDAVersion: "12.8",
		GPUs: []fakenode.GPUSpec{{Product: "H100-80GB-HBM3", Count: &count}}}
	data, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	node, err := fakenode.Parse("h100-16", data)
	if err != nil {
		t.Fatal(err)
	}
	lib := node.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	inv, err := discovery.Discover(lib)
	_ = lib.Shutdown()
	if err != nil {
		t.Fatal(err)
	}
	big := []*rules.CheckNode{{Name: "fake node h100-16", Inventory: inv}}
	const shared1024 = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: a\n  devices: gpu\n  resource: example.com/a\n  sharing: {strategy: time-slicing, replicas: 1024}\n"
	if checkInvariant(t, shared1024, big) {
		t.Errorf("rules check accepted 1024 replicas, which a 16-GPU node cannot take:\n%s", shared1024)
	}
	rs, err := rules.Parse("gen.yaml", []byte(shared1024))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.CheckOn("fake node h100-16", inv, nil); err == nil ||
		!strings.Contains(err.Error(), "16 devices x 1024 replicas = 16384 device IDs, over the cap of 8192 per resource") {
		t.Errorf("check on the 16-GPU node: %v", err)
	}
	for _, file := range []string{
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\n",
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n",
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules: []\n",
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: a\n  devices: gpu\n  resource: example.com/a\n  sharing: {strategy: time-slicing, replicas: 1000000000}\n",
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: a\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n",
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: a\n  devices: gpu\n  resource: 'example.com/{{ .product }}'\n",
	} {
		if checkInvariant(t, file, big) {
			t.Errorf("rules check accepted:\n%s", file)
		}
	}
}

// TestCheckAndRunRefuseATemplateInvalidOnSomeDevices: a template that is
// invalid on one device of a node (a +me profile) and valid on the others
// is refused by check on the node and by the agent's own test of a plan,
// with one message naming the file, rule, device and value.
func TestCheckAndRunRefuseATemplateInvalidOnSomeDevices(t *testing.T) {
	nodes, err := invariantNodes()
	if err != nil {
		t.Fatal(err)
	}
	var node *rules.CheckNode
	for i := range nodes {
		if nodes[i].Name == "fake node a100-80gb-mixed" {
			node = &nodes[i]
		}
	}
	if node == nil {
		t.Fatal("no catalog node a100-80gb-mixed")
	}
	const file = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: mig\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n"
	if checkInvariant(t, file, nil) {
		t.Fatal("rules check accepted a template invalid on +me profiles")
	}
	rs, err := rules.Parse("gen.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	_, checkErr := rs.CheckOn(node.Name, node.Inventory, nil)
	p, err := rulesengine.New().Parse("gen.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	runPlan, err := p.Plan(node.Inventory, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(runPlan.Resources) == 0 {
		t.Fatal("the template is valid on no device of the node: the test tests too little")
	}
	runErr := runPlan.CheckTemplates()
	const want = `gen.yaml:6: rules[0] "mig": resource: template gives "nvidia.com/mig-1g.10gb+me" for GPU 0 MIG 3 (1g.10gb+me) (MIG-`
	if checkErr == nil || runErr == nil || checkErr.Error() != runErr.Error() || !strings.HasPrefix(runErr.Error(), want) {
		t.Errorf("check on the node says %v,\nrun says %v,\nwant both %s...", checkErr, runErr, want)
	}
}

// FuzzCheckRunInvariant runs the invariant on files generated from fuzzed
// seeds.
func FuzzCheckRunInvariant(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42} {
		f.Add(s, s*7)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		var extra []*rules.CheckNode
		for i := range 3 {
			if n := genNode(t, r, i); n != nil {
				extra = append(extra, n)
			}
		}
		checkInvariant(t, genRules(r), extra)
	})
}
