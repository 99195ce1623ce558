package draclass_test

import (
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/draclass"
)

// ruleFiles are the rules files the class tests compile: the builtins, the
// examples shipped in manifests, and testdata's.
func ruleFiles(t *testing.T) []string {
	t.Helper()
	files := rules.BuiltinNames()
	for _, pattern := range []string{"../../manifests/examples/rules/*.yaml", "testdata/*.yaml"} {
		more, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, more...)
	}
	return files
}

// nodeLabels are the label sets nodes are planned with: none, and those
// the node selectors of the rules files select.
var nodeLabels = []map[string]string{nil, {"example.com/pool": "inference"}, {"example.com/pool": "a"}}

var (
	nodesOnce sync.Once
	nodes     []rules.CheckNode
	nodesErr  error
)

// catalogNodes are the catalog's nodes and testdata/nodes' (a GPU
// without NUMA affinity, which the catalog lacks).
func catalogNodes(t *testing.T) []rules.CheckNode {
	t.Helper()
	nodesOnce.Do(func() {
		nodes, nodesErr = catalog.Nodes()
		files, _ := filepath.Glob("testdata/nodes/*.yaml")
		for _, f := range files {
			if nodesErr != nil {
				return
			}
			var n *fakenode.Node
			if n, nodesErr = fakenode.Load(f); nodesErr != nil {
				return
			}
			var inv *discovery.Inventory
			if inv, nodesErr = discovery.Discover(n.NVML()); nodesErr == nil {
				nodes = append(nodes, rules.CheckNode{Name: "test node " + f, Inventory: inv})
			}
		}
	})
	if nodesErr != nil {
		t.Fatal(nodesErr)
	}
	return nodes
}

// sliceDevice is a device as the DRA sink publishes it.
type sliceDevice struct {
	id       string
	resource string // "" for a device no resource has
	dev      dracel.Device
}

// publish returns every device of a node as the DRA sink would publish it
// when it served every resource of the plan, and the devices no resource
// has (not published; given no resource attribute). Devices the plan left
// out (plan.Problems) are neither.
func publish(t *testing.T, rs *rules.RuleSet, inv *discovery.Inventory, labels map[string]string) []sliceDevice {
	t.Helper()
	p, err := rs.Plan(inv, labels)
	if err != nil {
		t.Fatalf("%s: plan: %v", rs.Source(), err)
	}
	resourceOf := map[string]string{}
	for _, r := range p.Resources {
		for _, d := range r.Devices {
			resourceOf[d.ID] = r.Name
		}
	}
	leftOut := map[string]bool{}
	for _, pr := range p.Problems {
		leftOut[pr.Device] = true
	}
	var out []sliceDevice
	add := func(id string, g *discovery.GPU, m *discovery.MIGDevice) {
		if leftOut[id] {
			return
		}
		schema, err := draattr.For(rs.DRACompatibility())
		if err != nil {
			t.Fatal(err)
		}
		attrs, caps := schema.Device(inv, g, m)
		name := resourceOf[id]
		if name != "" {
			attrs[draattr.AttrResource] = resourceapi.DeviceAttribute{StringValue: &name}
		}
		out = append(out, sliceDevice{id: id, resource: name, dev: dracel.Device{Driver: draattr.Domain, Attributes: attrs, Capacity: caps}})
	}
	byUUID := map[string]*discovery.GPU{}
	for gi := range inv.GPUs {
		g := &inv.GPUs[gi]
		byUUID[g.UUID] = g
		add(g.UUID, g, nil)
		for mi := range g.MIGDevices {
			add(g.MIGDevices[mi].UUID, g, &g.MIGDevices[mi])
		}
	}
	// A GPU partitioned on demand is published as placement devices, each
	// carrying the resource its profile (or the whole GPU) is offered as,
	// beside its parent's attributes.
	for _, dg := range p.DynamicMIG {
		g := byUUID[dg.UUID]
		if g == nil {
			t.Fatalf("%s: dynamic GPU %s not in the inventory", rs.Source(), dg.UUID)
		}
		names := []string{dg.WholeGPU}
		for _, prof := range dg.Profiles {
			names = append(names, prof.Resource)
		}
		for _, name := range names {
			if name == "" {
				continue
			}
			resourceOf[g.UUID+"/"+name] = name
			add(g.UUID+"/"+name, g, nil)
		}
	}
	return out
}

// TestClassesSelectWhatThePlannerGives evaluates every class's CEL, as the
// scheduler does, on every device of every catalog node, and checks that a
// class selects exactly the devices the planner gives its resource.
func TestClassesSelectWhatThePlannerGives(t *testing.T) {
	nodes := catalogNodes(t)
	compiler := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true})
	for _, file := range ruleFiles(t) {
		for _, compat := range []draattr.Compatibility{draattr.Own, draattr.NVIDIA} {
			t.Run(filepath.Base(file)+"/"+string(compat), func(t *testing.T) {
				t.Parallel()
				checkClassesSelect(t, file, compat, nodes, compiler)
			})
		}
	}
}

// checkClassesSelect is TestClassesSelectWhatThePlannerGives for one file
// under one naming.
func checkClassesSelect(t *testing.T, file string, compat draattr.Compatibility, nodes []rules.CheckNode, compiler celCompiler) {
	ctx := context.Background()
	rs, err := rules.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	rs = rs.WithDRACompatibility(compat)
	res, err := draclass.Compile(rs, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Classes) == 0 {
		t.Fatal("no classes")
	}
	progs := make([]dracel.CompilationResult, len(res.Classes))
	for i, c := range res.Classes {
		progs[i] = compiler.CompileCELExpression(c.Selector, dracel.Options{})
		if progs[i].Error != nil {
			t.Fatalf("class %s: %v\n%s", c.Name, progs[i].Error, c.Selector)
		}
		if progs[i].MaxCost > resourceapi.CELSelectorExpressionMaxCost {
			t.Errorf("class %s: estimated cost %d, over %d", c.Name, progs[i].MaxCost, resourceapi.CELSelectorExpressionMaxCost)
		}
	}
	labelSets := nodeLabels[:1]
	for _, v := range rs.Views() {
		if v.NodeSelector != "" {
			labelSets = nodeLabels
		}
	}
	checked := map[string]int{} // devices checked per class
	seen := map[string]bool{}   // devices checked, by what the classes read
	for _, n := range nodes {
		for _, labels := range labelSets {
			for _, d := range publish(t, rs, n.Inventory, labels) {
				if k := deviceKey(t, d); seen[k] {
					continue
				} else {
					seen[k] = true
				}
				for i, c := range res.Classes {
					if d.resource == "" && c.Fallback != "" {
						continue // no resource attribute: the sink never publishes it
					}
					if c.NVIDIA {
						continue // NVIDIA's classes: TestNVIDIAClasses
					}
					got, _, err := progs[i].DeviceMatches(ctx, d.dev)
					if err != nil {
						t.Fatalf("%s: class %s on %s: %v", n.Name, c.Name, d.id, err)
					}
					if want := d.resource == c.Resource; got != want {
						t.Errorf("%s: class %s selects %s (%s): %v, want %v (the planner gives it %q)\n%s",
							n.Name, c.Name, d.id, deviceSummary(d.dev), got, want, d.resource, c.Selector)
					}
					if got {
						checked[c.Name]++
					}
				}
			}
		}
	}
	// Every class selects something on the catalog, or the test
	// proves little.
	for _, c := range res.Classes {
		if checked[c.Name] == 0 && !c.NVIDIA {
			t.Errorf("class %s selects no catalog device", c.Name)
		}
	}
}

// celCompiler is the upstream DRA CEL compiler, as the scheduler uses it.
type celCompiler interface {
	CompileCELExpression(expression string, options dracel.Options) dracel.CompilationResult
}

func deviceSummary(d dracel.Device) string {
	var parts []string
	for _, k := range []resourceapi.QualifiedName{"type", "product", "profile", "parentProduct", "gpu.nvidia.com/type", "gpu.nvidia.com/productName", "gpu.nvidia.com/profile"} {
		if a, ok := d.Attributes[k]; ok && a.StringValue != nil {
			parts = append(parts, string(k)+"="+*a.StringValue)
		}
	}
	sort.Strings(parts)
	return strings.Join(slices.Compact(parts), " ")
}

// deviceKey identifies a published device by what the rules files of this
// test read: devices that differ only in their identity (UUIDs, PCI
// address, minor) are checked once.
func deviceKey(t *testing.T, d sliceDevice) string {
	t.Helper()
	attrs := maps.Clone(d.dev.Attributes)
	for _, k := range []resourceapi.QualifiedName{"uuid", "parentUuid", "minor", "gpu.nvidia.com/uuid", "gpu.nvidia.com/parentUUID",
		draattr.AttrPCIBusID, draattr.AttrPCIeRoot} {
		delete(attrs, k)
	}
	b, err := json.Marshal(struct {
		A map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
		C map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	}{attrs, d.dev.Capacity})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
