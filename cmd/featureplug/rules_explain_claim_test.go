//go:build !noclaimexplain

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// explainClaims runs rules explain --claim with args and decodes its JSON.
func explainClaims(t *testing.T, args ...string) []claimReport {
	t.Helper()
	out, errOut, err := runCommand(newRulesExplainCommand(), append(args, "-o", "json")...)
	if err != nil {
		t.Fatalf("rules explain %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	var reps []claimReport
	if err := json.Unmarshal([]byte(out), &reps); err != nil {
		t.Fatalf("output is no JSON list of claims: %v\n%s", err, out)
	}
	return reps
}

// nodeReport returns a claim's report of one node.
func nodeReport(t *testing.T, rep claimReport, node string) claimNodeReport {
	t.Helper()
	for _, n := range rep.Nodes {
		if n.Node == node {
			return n
		}
	}
	t.Fatalf("claim %s: no report of node %s", rep.Claim, node)
	return claimNodeReport{}
}

// TestExplainClaimFirstAvailable: the allocator picks the first
// subrequest a node can satisfy: an H100 on dgx-h100, an A100 on
// dgx-a100 (it has no H100), a 3g.40gb MIG slice on a node of nothing
// else, and nothing on an L40S node, saying why for each choice.
func TestExplainClaimFirstAvailable(t *testing.T) {
	claim := filepath.Join("testdata", "claim-first-available.yaml")
	reps := explainClaims(t, "--rules", "mixed", "--serve", "dra", "--claim", claim, "--all-fake-nodes")
	if len(reps) != 1 || reps[0].Claim != "ml/h100-else-a100-else-mig" {
		t.Fatalf("claims %+v", reps)
	}
	for node, want := range map[string]string{"dgx-h100": "h100", "h100-nvl": "h100", "dgx-a100": "a100", "a100-80gb-mixed": "a100", "l40s-pcie": ""} {
		n := nodeReport(t, reps[0], node)
		if n.Allocated != (want != "") || len(n.Requests) != 1 || n.Requests[0].Subrequest != want {
			t.Errorf("%s: allocated %v, requests %+v; want subrequest %q", node, n.Allocated, n.Requests, want)
			continue
		}
		r := n.Requests[0]
		if len(r.Choices) != 3 || r.Choices[0].Name != "h100" || r.Choices[2].Class != "mig-3g.40gb.nvidia.com.featureplug.io" {
			t.Errorf("%s: choices %+v", node, r.Choices)
		}
		if want == "" {
			continue
		}
		if len(r.Devices) != 1 || r.Devices[0].Resource != "nvidia.com/gpu" || r.Devices[0].Serve != "dra" || !strings.HasPrefix(r.Devices[0].Device, "gpu-") {
			t.Errorf("%s: devices %+v, want one whole GPU of nvidia.com/gpu through dra", node, r.Devices)
		}
	}
	if c := nodeReport(t, reps[0], "dgx-a100").Requests[0].Choices; c[0].Matching != 0 || c[1].Matching != 4 {
		t.Errorf("dgx-a100: choices %+v, want no H100 and its 4 whole A100s", c)
	}

	// The table says the same, with why each choice before the one taken
	// was not.
	out, _, err := runCommand(newRulesExplainCommand(), "--rules", "mixed", "--serve", "dra", "--claim", claim, "--fake-node", "dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Claim ml/h100-else-a100-else-mig: request gpu: firstAvailable h100 (class gpu.nvidia.com.featureplug.io), a100",
		"NODE      REQUEST  SUBREQUEST  DEVICES",
		"dgx-a100: gpu: h100: no device of the ResourceSlice matches (class gpu.nvidia.com.featureplug.io); a100: allocated",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestExplainClaimDevicePlugin: on a node whose rules leave the devices
// to the device plugin (--serve device-plugin), nothing is allocated and
// the explanation counts the devices that would match.
func TestExplainClaimDevicePlugin(t *testing.T) {
	reps := explainClaims(t, "--rules", "mixed", "--claim", filepath.Join("testdata", "claim-first-available.yaml"), "--fake-node", "dgx-h100")
	n := nodeReport(t, reps[0], "dgx-h100")
	if n.Allocated || n.Requests[0].Choices[0].Matching != 0 || n.Requests[0].Choices[0].MatchingNotDRA != 8 {
		t.Errorf("report %+v, want nothing allocated and 8 H100s served through the device plugin", n)
	}
}

// TestExplainClaimNVIDIA: with dra.compatibility: nvidia a claim written
// for NVIDIA's DRA driver (its class, its attribute names and CEL over
// its domain) is allocated featureplug's devices, named as NVIDIA's
// driver names them; a matchAttribute constraint on the standard PCIe
// root holds on a node whose GPUs share roots in pairs and not on one
// whose GPUs each have their own.
func TestExplainClaimNVIDIA(t *testing.T) {
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesFile, "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\ndra:\n  compatibility: nvidia\nrules:\n"+
		"- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n  serve: dra\n- name: mig\n  devices: mig\n  resource: nvidia.com/mig\n  serve: dra\n")
	claimFile := filepath.Join(dir, "claims.yaml")
	writeFile(t, claimFile, `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nvidia-product}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {expression: 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200" && device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("9.0.0"))'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: mig-profile}
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig.nvidia.com
        selectors:
        - cel: {expression: 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: pcie-pair}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.nvidia.com, count: 2}
    constraints:
    - requests: [gpus]
      matchAttribute: resource.kubernetes.io/pcieRoot
`)
	reps := explainClaims(t, "--rules", rulesFile, "--claim", claimFile, "--all-fake-nodes")
	if len(reps) != 3 {
		t.Fatalf("claims %+v", reps)
	}
	b200 := nodeReport(t, reps[0], "hgx-b200")
	if !b200.Allocated || b200.Requests[0].Devices[0].Device != "gpu-0" {
		t.Errorf("hgx-b200: %+v, want NVIDIA's claim allocated gpu-0", b200)
	}
	if h100 := nodeReport(t, reps[0], "dgx-h100"); h100.Allocated {
		t.Errorf("dgx-h100 allocated a claim for a B200: %+v", h100)
	}
	mig := nodeReport(t, reps[1], "a100-80gb-mixed")
	if !mig.Allocated || !strings.HasPrefix(mig.Requests[0].Devices[0].Device, "gpu-0-mig-1g10gb-") {
		t.Errorf("a100-80gb-mixed: %+v, want the 1g.10gb MIG device by NVIDIA's name", mig)
	}
	if n := nodeReport(t, reps[2], "hgx-b200"); !n.Allocated || strings.Join(deviceNamesOf(n), ",") != "gpu-0,gpu-1" {
		t.Errorf("hgx-b200: %+v, want GPUs 0 and 1 (one PCIe root)", n)
	}
	if n := nodeReport(t, reps[2], "dgx-h100"); n.Allocated {
		t.Errorf("dgx-h100 (a PCIe root per GPU) allocated a pair under one root: %+v", n)
	}
}

func deviceNamesOf(n claimNodeReport) []string {
	var out []string
	for _, r := range n.Requests {
		for _, d := range r.Devices {
			out = append(out, d.Device)
		}
	}
	return out
}

// TestExplainClaimErrors: a claim file that is no claim, a class no one
// makes, and a file class taking a featureplug class's name are errors
// naming the file and what is wrong.
func TestExplainClaimErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ file, want string }{
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", `document 1: apiVersion "v1": want resource.k8s.io/v1`},
		{"apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: x}\n", "no ResourceClaim or ResourceClaimTemplate"},
		{"apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec: {devices: {requests: [{name: gpu}]}}\n",
			`claim c: spec.devices.requests[0] "gpu": exactly one of exactly and firstAvailable`},
		{"apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: nonesuch}}]}}\n",
			"DeviceClass nonesuch: neither featureplug's for these rules nor in the claim file"},
		{"apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.nvidia.com.featureplug.io}\n---\n" +
			"apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c}\nspec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: x}}]}}\n",
			"DeviceClass gpu.nvidia.com.featureplug.io of the claim file: featureplug dra classes makes a class of that name"},
	} {
		path := filepath.Join(dir, "claim.yaml")
		writeFile(t, path, c.file)
		_, _, err := runCommand(newRulesExplainCommand(), "--rules", "mixed", "--serve", "dra", "--claim", path, "--fake-node", "workstation")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.file, err, c.want)
		}
	}
	if _, _, err := runCommand(newRulesExplainCommand(), "--all-fake-nodes"); err == nil {
		t.Error("--all-fake-nodes without --claim ran")
	}
}
