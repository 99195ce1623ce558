//go:build !noclaimexplain

package main

// rules explain --claim: per node, which devices a ResourceClaim would be
// allocated, with kube-scheduler's own allocator
// (k8s.io/dynamic-resource-allocation/structured) over the ResourceSlice
// the node's agent would publish and the DeviceClasses dra classes makes,
// and per request (or firstAvailable subrequest) how many of the node's
// devices its class and selectors match, with the same CEL library. The
// agent's image is built without it (-tags noclaimexplain): CEL and the
// allocator are about 8 MB of binary the agent never runs.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/plugin/dra"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/draclass"
	"github.com/featureplug/featureplug/rules/plan"
)

// claimAllocatorFeatures are the DRA features of Kubernetes 1.37 the
// explanation allocates with: prioritized lists, admin access, device
// taints and consumable capacity (featureplug's shared devices) are on
// by default there.
var claimAllocatorFeatures = structured.Features{PrioritizedList: true, AdminAccess: true, DeviceTaints: true, ConsumableCapacity: true}

// claimCDIKind is the CDI kind the explanation builds slices with; CDI
// names do not matter to allocation.
const claimCDIKind = "featureplug.io/gpu"

// claimNode is one node a claim is explained on.
type claimNode struct {
	name   string
	inv    *discovery.Inventory
	labels map[string]string
}

// claimFile is what a claim file holds.
type claimFile struct {
	claims  []*resourceapi.ResourceClaim
	classes []*resourceapi.DeviceClass
}

// claimReport is the explanation of one claim.
type claimReport struct {
	// Claim is "<namespace>/<name>" (a template's name for a template).
	Claim string            `json:"claim"`
	Nodes []claimNodeReport `json:"nodes"`
}

// claimNodeReport is what one node would allocate a claim.
type claimNodeReport struct {
	Node string `json:"node"`
	// Allocated says whether the node can allocate the whole claim.
	Allocated bool `json:"allocated"`
	// Error says why the node could not be explained (its plan failed).
	Error    string               `json:"error,omitempty"`
	Requests []claimRequestReport `json:"requests,omitempty"`
}

// claimRequestReport is one request of a claim on one node.
type claimRequestReport struct {
	Request string `json:"request"`
	// Subrequest is the firstAvailable entry allocated; "" for a request
	// without subrequests or one that is not allocated.
	Subrequest string `json:"subrequest,omitempty"`
	// Devices are the devices allocated to it.
	Devices []claimDeviceReport `json:"devices,omitempty"`
	// Choices are the request itself, or its subrequests in order, with
	// how many of the node's devices each matches.
	Choices []claimChoiceReport `json:"choices"`
}

// claimChoiceReport is how a request or subrequest fares on a node.
type claimChoiceReport struct {
	Name  string `json:"name"`
	Class string `json:"class"`
	// Matching counts the devices of the node's ResourceSlice its class
	// and selectors match; MatchingNotDRA those they would match among
	// the node's devices its rules serve through the device plugin.
	Matching       int    `json:"matching"`
	MatchingNotDRA int    `json:"matchingNotDRA,omitempty"`
	Error          string `json:"error,omitempty"`
}

// claimDeviceReport is one allocated device.
type claimDeviceReport struct {
	Device   string `json:"device"`
	Resource string `json:"resource"`
	// Serve is the kubelet API that serves the device on the node: dra,
	// since only those are in the slice.
	Serve plan.Serve `json:"serve"`
}

// explain runs `rules explain --claim`.
func (f *claimFlags) explain(cmd *cobra.Command, src sourceFlags, cluster *explainNodeFlags, rulesFile string, nodeLabels map[string]string, output string) error {
	serve, err := f.defaultServe(cmd)
	if err != nil {
		return err
	}
	file, err := readClaimFile(f.file)
	if err != nil {
		return asFailure(err)
	}
	rs, nodes, err := f.claimNodes(cmd, src, cluster, rulesFile, nodeLabels)
	if err != nil {
		return err
	}
	classes, err := claimClasses(rs, nodes, file)
	if err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	lister := classLister(classes)
	var reports []claimReport
	for _, claim := range file.claims {
		rep := claimReport{Claim: claim.Namespace + "/" + claim.Name}
		for _, n := range nodes {
			nr, err := explainClaimOn(cmd.Context(), rs, n, serve, claim, lister)
			if err != nil {
				return &exitError{code: exitFailed, err: fmt.Errorf("claim %s on %s: %w", rep.Claim, n.name, err)}
			}
			rep.Nodes = append(rep.Nodes, nr)
		}
		reports = append(reports, rep)
	}
	switch output {
	case "json":
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	case "yaml":
		data, err := yaml.Marshal(reports)
		if err != nil {
			return err
		}
		_, err = cmd.OutOrStdout().Write(data)
		return err
	}
	return writeClaimReports(cmd.OutOrStdout(), file, reports)
}

// claimNodes returns the rules and the nodes to explain claims on: every
// bundled fake node (--all-fake-nodes), a node of the cluster (--node),
// or the node explain reads (--fake-node, or this machine).
func (f *claimFlags) claimNodes(cmd *cobra.Command, src sourceFlags, cluster *explainNodeFlags, rulesFile string, nodeLabels map[string]string) (*rules.RuleSet, []claimNode, error) {
	ctx := cmd.Context()
	if cluster.node != "" {
		if f.allFakeNodes {
			return nil, nil, usageErrorf("--all-fake-nodes explains fake nodes: it cannot be used with --node")
		}
		for _, local := range []string{"fake-node", "node-labels", "driver-root", "nvml-library", "sysfs-root"} {
			if fl := cmd.Flags().Lookup(local); fl != nil && fl.Changed {
				return nil, nil, usageErrorf("--%s describes this machine: it cannot be used with --node", local)
			}
		}
		return clusterClaimNode(cmd, cluster, rulesFile)
	}
	rs := rules.Default()
	if rulesFile != "" {
		var err error
		if rs, err = loadRules(rulesFile); err != nil {
			return nil, nil, err
		}
	}
	if f.allFakeNodes {
		if src.fakeNode != "" {
			return nil, nil, usageErrorf("--all-fake-nodes explains every bundled fake node: drop --fake-node")
		}
		var nodes []claimNode
		for _, name := range fakenode.BundledNames() {
			inv, err := discoverInventory(ctx, sourceFlags{fakeNode: name})
			if err != nil {
				return nil, nil, fmt.Errorf("fake node %s: %w", name, err)
			}
			nodes = append(nodes, claimNode{name: name, inv: inv, labels: nodeLabels})
		}
		return rs, nodes, nil
	}
	inv, err := discoverInventory(ctx, src)
	if err != nil {
		return nil, nil, err
	}
	name := "this machine"
	if src.fakeNode != "" {
		name = src.fakeNode
	}
	return rs, []claimNode{{name: name, inv: inv, labels: nodeLabels}}, nil
}

// clusterClaimNode reads a node of the cluster from its published
// features, and the rules (the agents' ConfigMap without --rules).
func clusterClaimNode(cmd *cobra.Command, cluster *explainNodeFlags, rulesFile string) (*rules.RuleSet, []claimNode, error) {
	r, err := cluster.reader()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), cluster.timeout)
	defer cancel()
	cr, err := loadClusterRules(ctx, r, &cluster.clusterFlags, rulesFile)
	if err != nil {
		return nil, nil, &exitError{code: exitFailed, err: err}
	}
	n, err := r.Node(ctx, cluster.node)
	if err != nil {
		return nil, nil, err
	}
	nfs, err := r.NodeFeatures(ctx, cluster.node)
	if err != nil {
		return nil, nil, err
	}
	cn := &clusterNode{name: cluster.node, labels: n.Labels, feature: pickNodeFeature(cluster.node, cluster.namespace, nfs)}
	if cn.feature == nil {
		return nil, nil, &exitError{code: exitFailed, err: fmt.Errorf("node %s: no featureplug NodeFeature: the agent has not published its features", cluster.node)}
	}
	rebuilt, err := cn.rebuild()
	if err != nil {
		return nil, nil, &exitError{code: exitFailed, err: fmt.Errorf("node %s: %w", cluster.node, err)}
	}
	for _, g := range rebuilt.Gaps {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", g)
	}
	return cr.rs, []claimNode{{name: cluster.node, inv: rebuilt.Inventory, labels: n.Labels}}, nil
}

// readClaimFile reads the ResourceClaims, ResourceClaimTemplates (as the
// claims they make) and DeviceClasses of a YAML or JSON file of one or
// more documents.
func readClaimFile(path string) (*claimFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usageErrorf("--claim: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--claim: %w", err)
	}
	out := &claimFile{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if meta.APIVersion != resourceapi.SchemeGroupVersion.String() {
			return nil, fmt.Errorf("%s: document %d: apiVersion %q: want %s", path, i+1, meta.APIVersion, resourceapi.SchemeGroupVersion)
		}
		switch meta.Kind {
		case "ResourceClaim":
			var c resourceapi.ResourceClaim
			if err := yaml.UnmarshalStrict(doc, &c); err != nil {
				return nil, fmt.Errorf("%s: document %d (ResourceClaim): %w", path, i+1, err)
			}
			out.claims = append(out.claims, &c)
		case "ResourceClaimTemplate":
			var t resourceapi.ResourceClaimTemplate
			if err := yaml.UnmarshalStrict(doc, &t); err != nil {
				return nil, fmt.Errorf("%s: document %d (ResourceClaimTemplate): %w", path, i+1, err)
			}
			out.claims = append(out.claims, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: t.Namespace}, Spec: t.Spec.Spec})
		case "DeviceClass":
			var c resourceapi.DeviceClass
			if err := yaml.UnmarshalStrict(doc, &c); err != nil {
				return nil, fmt.Errorf("%s: document %d (DeviceClass): %w", path, i+1, err)
			}
			out.classes = append(out.classes, &c)
		default:
			return nil, fmt.Errorf("%s: document %d: kind %q: want ResourceClaim, ResourceClaimTemplate or DeviceClass", path, i+1, meta.Kind)
		}
	}
	if len(out.claims) == 0 {
		return nil, fmt.Errorf("%s: no ResourceClaim or ResourceClaimTemplate", path)
	}
	for _, c := range out.claims {
		if c.Namespace == "" {
			c.Namespace = metav1.NamespaceDefault
		}
		if err := checkClaim(c); err != nil {
			return nil, fmt.Errorf("%s: claim %s: %w", path, c.Name, err)
		}
		defaultClaim(c)
	}
	return out, nil
}

// asFailure gives err the exit code of a failed explanation unless it
// carries one (a usage error).
func asFailure(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitFailed, err: err}
}

// defaultClaim sets what the API server defaults in a claim's requests:
// allocation mode ExactCount, count 1.
func defaultClaim(c *resourceapi.ResourceClaim) {
	mode := func(m *resourceapi.DeviceAllocationMode, count *int64) {
		if *m == "" {
			*m = resourceapi.DeviceAllocationModeExactCount
		}
		if *m == resourceapi.DeviceAllocationModeExactCount && *count == 0 {
			*count = 1
		}
	}
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			mode(&r.Exactly.AllocationMode, &r.Exactly.Count)
		}
		for j := range r.FirstAvailable {
			mode(&r.FirstAvailable[j].AllocationMode, &r.FirstAvailable[j].Count)
		}
	}
}

// checkClaim refuses what the API server would refuse of a claim's
// requests and the allocator cannot take.
func checkClaim(c *resourceapi.ResourceClaim) error {
	if len(c.Spec.Devices.Requests) == 0 {
		return errors.New("spec.devices.requests: none")
	}
	for i, r := range c.Spec.Devices.Requests {
		switch {
		case r.Name == "":
			return fmt.Errorf("spec.devices.requests[%d]: no name", i)
		case (r.Exactly == nil) == (len(r.FirstAvailable) == 0):
			return fmt.Errorf("spec.devices.requests[%d] %q: exactly one of exactly and firstAvailable", i, r.Name)
		case r.Exactly != nil && r.Exactly.DeviceClassName == "":
			return fmt.Errorf("spec.devices.requests[%d] %q: exactly.deviceClassName: empty", i, r.Name)
		}
		for j, s := range r.FirstAvailable {
			if s.Name == "" || s.DeviceClassName == "" {
				return fmt.Errorf("spec.devices.requests[%d] %q: firstAvailable[%d]: name and deviceClassName are required", i, r.Name, j)
			}
		}
	}
	return nil
}

// claimClasses are the classes claims are allocated with: those dra
// classes makes of the rules (on the catalog and the explained nodes), and
// the file's, which may not take a name of featureplug's.
func claimClasses(rs *rules.RuleSet, nodes []claimNode, file *claimFile) (map[string]*resourceapi.DeviceClass, error) {
	known, err := catalog.Nodes()
	if err != nil {
		return nil, fmt.Errorf("building the fake-node catalog: %w", err)
	}
	for _, n := range nodes {
		known = append(known, rules.CheckNode{Name: n.name, Inventory: n.inv})
	}
	res, err := draclass.Compile(rs, known)
	if err != nil {
		return nil, err
	}
	out := map[string]*resourceapi.DeviceClass{}
	for _, c := range res.Classes {
		out[c.Name] = c.Object
	}
	for _, c := range file.classes {
		if _, dup := out[c.Name]; dup {
			return nil, fmt.Errorf("DeviceClass %s of the claim file: featureplug dra classes makes a class of that name for these rules", c.Name)
		}
		out[c.Name] = c
	}
	return out, nil
}

// classLister is a DeviceClassLister over classes by name.
type classLister map[string]*resourceapi.DeviceClass

var _ structured.DeviceClassLister = classLister(nil)

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	c, ok := l[name]
	if !ok {
		return nil, fmt.Errorf("DeviceClass %s: neither featureplug's for these rules nor in the claim file", name)
	}
	return c, nil
}

// explainClaimOn allocates a claim on one node as kube-scheduler would,
// with no other claim allocated there, and counts what each request and
// subrequest matches.
func explainClaimOn(ctx context.Context, rs *rules.RuleSet, n claimNode, serve plan.Serve, claim *resourceapi.ResourceClaim, classes classLister) (claimNodeReport, error) {
	rep := claimNodeReport{Node: n.name}
	p, err := rs.Plan(n.inv, n.labels)
	if err != nil {
		rep.Error = "the rules do not apply: " + err.Error()
		return rep, nil
	}
	served, err := dra.BuildSlice(n.inv, p, dra.BuildOptions{Default: serve, CDIKind: claimCDIKind})
	if err != nil {
		rep.Error = err.Error()
		return rep, nil
	}
	// Every device of the plan, as the slice would hold it if every
	// resource were served through DRA: what the device plugin serves
	// but a selector would match.
	everything := *p
	everything.Resources = slices.Clone(p.Resources)
	for i := range everything.Resources {
		everything.Resources[i].Serve = plan.ServeDRA
	}
	all, err := dra.BuildSlice(n.inv, &everything, dra.BuildOptions{Default: plan.ServeDRA, CDIKind: claimCDIKind})
	if err != nil {
		rep.Error = err.Error()
		return rep, nil
	}
	inSlice := map[string]bool{}
	for _, d := range served.Devices {
		inSlice[d.Name] = true
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeObjectName(n.name), Labels: n.labels}}
	nodeName := node.Name
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-" + dra.DriverName},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: &nodeName,
			Pool: resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1}, Devices: served.Devices},
	}
	cache := dracel.NewCache(64, dracel.Features{EnableConsumableCapacity: true})
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	alloc, err := structured.NewAllocator(ctx, claimAllocatorFeatures, state, classes, []*resourceapi.ResourceSlice{slice}, cache)
	if err != nil {
		return rep, err
	}
	results, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim.DeepCopy()})
	if err != nil {
		return rep, err
	}
	rep.Allocated = len(results) == 1
	allocated := map[string][]resourceapi.DeviceRequestAllocationResult{}
	if rep.Allocated {
		for _, r := range results[0].Devices.Results {
			req, _, _ := strings.Cut(r.Request, "/")
			allocated[req] = append(allocated[req], r)
		}
	}
	for _, r := range claim.Spec.Devices.Requests {
		rr := claimRequestReport{Request: r.Name}
		for _, a := range allocated[r.Name] {
			if _, sub, ok := strings.Cut(a.Request, "/"); ok {
				rr.Subrequest = sub
			}
			d, _ := served.Table.Lookup(a.Device)
			rr.Devices = append(rr.Devices, claimDeviceReport{Device: a.Device, Resource: d.Resource, Serve: plan.ServeDRA})
		}
		choose := func(name, class string, selectors []resourceapi.DeviceSelector) {
			c := claimChoiceReport{Name: name, Class: class}
			var cerr error
			if c.Matching, c.MatchingNotDRA, cerr = countMatches(ctx, cache, classes, class, selectors, all.Devices, inSlice); cerr != nil {
				c.Error = cerr.Error()
			}
			rr.Choices = append(rr.Choices, c)
		}
		if r.Exactly != nil {
			choose(r.Name, r.Exactly.DeviceClassName, r.Exactly.Selectors)
		}
		for _, s := range r.FirstAvailable {
			choose(s.Name, s.DeviceClassName, s.Selectors)
		}
		rep.Requests = append(rep.Requests, rr)
	}
	return rep, nil
}

// nodeObjectName is a node's name as a Node object's: a fake node file's
// path made a name.
func nodeObjectName(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-.")
}

// countMatches counts the devices a class's and a request's selectors
// all match: in the slice, and among the devices the slice leaves to the
// device plugin.
func countMatches(ctx context.Context, cache *dracel.Cache, classes classLister, className string, selectors []resourceapi.DeviceSelector, devices []resourceapi.Device, inSlice map[string]bool) (int, int, error) {
	class, err := classes.Get(className)
	if err != nil {
		return 0, 0, err
	}
	var exprs []string
	for _, s := range append(slices.Clone(class.Spec.Selectors), selectors...) {
		if s.CEL != nil {
			exprs = append(exprs, s.CEL.Expression)
		}
	}
	var inDRA, outside int
	for _, d := range devices {
		ok := true
		for _, e := range exprs {
			prog := cache.GetOrCompile(e)
			if prog.Error != nil {
				return 0, 0, fmt.Errorf("selector %q: %v", e, prog.Error)
			}
			match, _, err := prog.DeviceMatches(ctx, dracel.Device{Driver: dra.DriverName, Attributes: d.Attributes, Capacity: d.Capacity,
				AllowMultipleAllocations: d.AllowMultipleAllocations})
			if err != nil {
				return 0, 0, fmt.Errorf("device %s: %w", d.Name, err)
			}
			if !match {
				ok = false
				break
			}
		}
		switch {
		case !ok:
		case inSlice[d.Name]:
			inDRA++
		default:
			outside++
		}
	}
	return inDRA, outside, nil
}

// writeClaimReports writes the explanations for people: per claim a table
// of what each node allocates to each request, then why the choices
// before the one allocated (or all of them) were not.
func writeClaimReports(w io.Writer, file *claimFile, reports []claimReport) error {
	var b strings.Builder
	for i, rep := range reports {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "Claim %s: %s\n\n", rep.Claim, describeRequests(file.claims[i]))
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tREQUEST\tSUBREQUEST\tDEVICES\tRESOURCE\tSERVE")
		var why []string
		for _, n := range rep.Nodes {
			if n.Error != "" {
				fmt.Fprintf(tw, "%s\t-\t-\tnot explained: %s\t\t\n", n.Node, n.Error)
				continue
			}
			if !n.Allocated {
				serve := ""
				if notDRA(n) > 0 {
					serve = fmt.Sprintf("%s (%d devices would match)", plan.ServeDevicePlugin, notDRA(n))
				}
				fmt.Fprintf(tw, "%s\t-\t-\tcannot be allocated\t\t%s\n", n.Node, serve)
			}
			for _, r := range n.Requests {
				if n.Allocated {
					names, res := make([]string, len(r.Devices)), map[string]bool{}
					for k, d := range r.Devices {
						names[k] = d.Device
						res[d.Resource] = true
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, r.Request, cmp.Or(r.Subrequest, "-"), strings.Join(names, ","),
						strings.Join(slices.Sorted(maps.Keys(res)), ","), plan.ServeDRA)
				}
				if line := choiceNotes(r, n.Allocated); line != "" {
					why = append(why, fmt.Sprintf("%s: %s: %s", n.Node, r.Request, line))
				}
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(why) > 0 {
			b.WriteByte('\n')
			for _, l := range why {
				b.WriteString(l + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// notDRA is the most devices served through the device plugin any choice
// of an unallocated claim would match on the node.
func notDRA(n claimNodeReport) int {
	most := 0
	for _, r := range n.Requests {
		for _, c := range r.Choices {
			most = max(most, c.MatchingNotDRA)
		}
	}
	return most
}

// choiceNotes says how the choices of a request fared, up to the one
// allocated: "h100: no device matches (class gpu.nvidia.com); a100:
// allocated". It is "" for an allocated request without subrequests.
func choiceNotes(r claimRequestReport, allocated bool) string {
	if allocated && r.Subrequest == "" {
		return ""
	}
	var parts []string
	for _, c := range r.Choices {
		if allocated && c.Name == r.Subrequest {
			parts = append(parts, c.Name+": allocated")
			break
		}
		var s string
		switch {
		case c.Error != "":
			s = c.Name + ": " + c.Error
		case c.Matching == 0:
			s = fmt.Sprintf("%s: no device of the ResourceSlice matches (class %s)", c.Name, c.Class)
		default:
			s = fmt.Sprintf("%s: %d devices match, not enough for its count or the claim's constraints", c.Name, c.Matching)
		}
		if c.MatchingNotDRA > 0 {
			s += fmt.Sprintf("; %d devices served through the device plugin would match (serve: dra in the rules, or --serve dra)", c.MatchingNotDRA)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// describeRequests says what a claim asks for: "request gpu:
// firstAvailable h100 (class gpu.nvidia.com), a100 (class ...)".
func describeRequests(c *resourceapi.ResourceClaim) string {
	var parts []string
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil {
			parts = append(parts, fmt.Sprintf("request %s (class %s)", r.Name, r.Exactly.DeviceClassName))
			continue
		}
		subs := make([]string, len(r.FirstAvailable))
		for i, s := range r.FirstAvailable {
			subs[i] = fmt.Sprintf("%s (class %s)", s.Name, s.DeviceClassName)
		}
		parts = append(parts, fmt.Sprintf("request %s: firstAvailable %s", r.Name, strings.Join(subs, ", ")))
	}
	return strings.Join(parts, "; ")
}
