package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

// runDRA runs `featureplug dra ...` in process.
func runDRA(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runCommand(newDRACommand(), args...)
}

func TestDRAClassesYAML(t *testing.T) {
	out, errOut, err := runDRA(t, "classes", "--rules", "mixed")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	docs := strings.Split(out, "\n---\n")
	if len(docs) < 2 {
		t.Fatalf("want a class for nvidia.com/gpu and for MIG profiles, got %d documents:\n%s", len(docs), out)
	}
	var gpu *resourceapi.DeviceClass
	for _, doc := range docs {
		var c resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
			t.Fatalf("document is not a DeviceClass: %v\n%s", err, doc)
		}
		if c.APIVersion != "resource.k8s.io/v1" || c.Kind != "DeviceClass" || c.Spec.ExtendedResourceName == nil {
			t.Errorf("class %s: %+v", c.Name, c)
		}
		if c.Name == "gpu.nvidia.com.featureplug.io" {
			gpu = &c
		}
	}
	if strings.Contains(out, "creationTimestamp") {
		t.Errorf("output has creationTimestamp:\n%s", out)
	}
	want := `device.driver == "gpu.featureplug.io" && device.attributes["gpu.featureplug.io"].type == "gpu" && !device.attributes["gpu.featureplug.io"].migEnabled`
	if gpu == nil || *gpu.Spec.ExtendedResourceName != "nvidia.com/gpu" || gpu.Spec.Selectors[0].CEL.Expression != want {
		t.Errorf("class gpu.nvidia.com.featureplug.io = %+v, want extendedResourceName nvidia.com/gpu and selector %s", gpu, want)
	}
	// CEL expresses the rules; the one warning is that NVIDIA's driver
	// serves nvidia.com/gpu too, where it is installed.
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 ||
		!strings.HasPrefix(lines[0], "warning: where NVIDIA's DRA driver is installed: DeviceClass gpu.nvidia.com.featureplug.io would serve the extended resource nvidia.com/gpu") {
		t.Errorf("stderr: %s", errOut)
	}
}

func TestDRAClassesJSONAndWarnings(t *testing.T) {
	file := filepath.Join("..", "..", "manifests", "examples", "rules", "mps-inference-pool.yaml")
	out, errOut, err := runDRA(t, "classes", "--rules", file, "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var list struct {
		APIVersion, Kind string
		Items            []resourceapi.DeviceClass
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.Kind != "List" || len(list.Items) == 0 {
		t.Fatalf("not a List of classes (%v):\n%s", err, out)
	}
	for _, w := range []string{
		`warning: ` + file + `:17: rules[0] "h100-inference-mps": nodeSelector: a DeviceClass cannot select nodes`,
		`(have "example.com/pool=inference")`,
	} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
}

func TestDRAClassesInputs(t *testing.T) {
	// An NVIDIA device-plugin config is converted as rules check does.
	out, errOut, err := runDRA(t, "classes", "--rules", filepath.Join("..", "..", "rules", "nvidiaconfig", "testdata", "time-slicing.yaml"))
	if err != nil || !strings.Contains(out, "kind: DeviceClass") {
		t.Errorf("NVIDIA config: %v\n%s\n%s", err, out, errOut)
	}
	// More nodes to take template names from.
	if out, errOut, err := runDRA(t, "classes", "--rules", "mixed", "--fake-node", "workstation"); err != nil || !strings.Contains(out, "name: mig-1g.5gb.nvidia.com.featureplug.io") {
		t.Errorf("--fake-node: %v\n%s", err, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"classes"}, "dra classes: no rules file"},
		{[]string{"classes", "--rules", "mixed", "-o", "table"}, `--output: "table"`},
		{[]string{"classes", "--rules", "mixd"}, `did you mean "mixed"?`},
		{[]string{"classes", "--rules", "mixed", "--fake-node", "no-such-node"}, `--fake-node no-such-node: fake node "no-such-node"`},
		{[]string{"classes", "--rules", filepath.Join("..", "..", "rules", "testdata", "many-errors.yaml")}, `many-errors.yaml:8: rules[0] "typo"`},
	} {
		if _, _, err := runDRA(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("dra %s: %v, want an error with %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestRulesExplainDRAView: explain shows the DRA view when asked (--dra)
// or when a resource is served through DRA (--serve dra, as the agent is
// run), and not otherwise; the SERVE column names the API.
func TestRulesExplainDRAView(t *testing.T) {
	out, _, err := runRules(t, "explain", "--rules", "per-model", "--fake-node", "a100-80gb-mixed", "--dra")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"  serve     device-plugin (the agent's --serve), DRA class a100-80gb.nvidia.com.featureplug.io",
		"RESOURCE                   DEVICES  SHARING  SERVE",
		"nvidia.com/a100-80gb       1        none     device-plugin",
		"DRA (featureplug dra classes)",
		"nvidia.com/mig-3g.40gb\n  class     mig-3g.40gb.nvidia.com.featureplug.io\n  selector  device.driver == \"gpu.featureplug.io\" && device.attributes[\"gpu.featureplug.io\"].type == \"mig\" && device.attributes[\"gpu.featureplug.io\"].profile == \"3g.40gb\"\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("explain --dra output lacks %q:\n%s", w, out)
		}
	}
	out, _, err = runRules(t, "explain", "--rules", "per-model", "--fake-node", "a100-80gb-mixed")
	if err != nil || strings.Contains(out, "DRA") || strings.Contains(out, "SERVE") || strings.Contains(out, "serve ") {
		t.Errorf("explain without DRA shows the DRA view: %v\n%s", err, out)
	}
	out, _, err = runRules(t, "explain", "--rules", "per-model", "--fake-node", "a100-80gb-mixed", "--serve", "dra")
	if err != nil || !strings.Contains(out, "nvidia.com/a100-80gb       1        none     dra") || !strings.Contains(out, "DRA (featureplug dra classes)") {
		t.Errorf("explain --serve dra: %v\n%s", err, out)
	}
	out, _, err = runRules(t, "explain", "--rules", "per-model", "--fake-node", "a100-80gb-mixed", "--serve", "dra", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		DRA map[string]struct{ Name, Selector string }
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if c := doc.DRA["nvidia.com/a100-80gb"]; c.Name != "a100-80gb.nvidia.com.featureplug.io" || !strings.Contains(c.Selector, `quantity("70000Mi")`) {
		t.Errorf("dra[nvidia.com/a100-80gb] = %+v", c)
	}
}

// TestAgentLinksNoCEL: the class compiler's tests evaluate selectors with
// k8s.io/dynamic-resource-allocation's CEL package; the agent, as the
// image builds it (-tags noclaimexplain), must not link it (or cel-go):
// classes are written as text. Only the standard attribute helpers
// (deviceattribute, which read sysfs) are linked.
func TestAgentLinksNoCEL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	cmd := exec.Command("go", "list", "-deps", "-tags", "noclaimexplain", "github.com/featureplug/featureplug/cmd/featureplug")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(out))
	found := false
	for _, pkg := range pkgs {
		found = found || pkg == "github.com/featureplug/featureplug/rules/draclass"
		if strings.HasPrefix(pkg, "github.com/google/cel-go/") ||
			strings.HasPrefix(pkg, "k8s.io/dynamic-resource-allocation/") && pkg != "k8s.io/dynamic-resource-allocation/deviceattribute" {
			t.Errorf("cmd/featureplug links %s", pkg)
		}
	}
	if !found {
		t.Errorf("cmd/featureplug does not link rules/draclass: the check proves nothing")
	}
}
