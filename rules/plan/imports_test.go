package plan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the product module's path.
const module = "github.com/featureplug/featureplug"

// nfdEvaluator is NFD's rule evaluator: only the rules engine may link it.
const nfdEvaluator = "sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"

// listedPackage is what `go list -json` says of one package.
type listedPackage struct {
	ImportPath string
	Deps       []string
}

// under reports whether path is pkg or below it.
func under(path, pkg string) bool {
	return path == pkg || strings.HasPrefix(path, pkg+"/")
}

// importRule is one rule of the architecture (docs/architecture.md): the
// packages under pkg must not depend, even indirectly, on a package that
// forbidden returns true for.
type importRule struct {
	pkg       string
	why       string
	forbidden func(dep string) bool
}

// ours reports whether dep is a package of the product module.
func ours(dep string) bool { return under(dep, module) }

// importRules are the rules of docs/architecture.md.
var importRules = []importRule{
	{module + "/discovery", "discovery imports nothing of featureplug", func(d string) bool {
		return ours(d) && !under(d, module+"/discovery")
	}},
	{module + "/rules/plan", "the plan contract imports only discovery", func(d string) bool {
		return ours(d) && !under(d, module+"/discovery")
	}},
	{module + "/rules", "the rules engine does not import the servers of plans", func(d string) bool {
		return under(d, module+"/plugin") || under(d, module+"/labeler") || under(d, module+"/cmd")
	}},
	{module + "/labeler", "the labeler reads plans only through rules/plan", func(d string) bool {
		return (under(d, module+"/rules") && !under(d, module+"/rules/plan")) || under(d, module+"/plugin") ||
			under(d, module+"/cmd")
	}},
	{module + "/plugin", "the device plugins read plans only through rules/plan", func(d string) bool {
		return (under(d, module+"/rules") && !under(d, module+"/rules/plan")) || under(d, module+"/labeler") ||
			under(d, module+"/cmd")
	}},
	{module + "/labeler", "the labeler does not link NFD's rule evaluator", func(d string) bool { return under(d, nfdEvaluator) }},
	{module + "/plugin", "the device plugins do not link NFD's rule evaluator", func(d string) bool { return under(d, nfdEvaluator) }},
	{module + "/cmd/internal/agent", "the agent serves plans: it reads them through rules/plan and is given the rules engine (cmd/internal/rulesengine)", func(d string) bool {
		return (under(d, module+"/rules") && !under(d, module+"/rules/plan")) || under(d, nfdEvaluator)
	}},
}

// violations returns one line per package that breaks an import rule,
// naming the package, the dependency and the rule.
func violations(pkgs []listedPackage) []string {
	var out []string
	for _, p := range pkgs {
		for _, r := range importRules {
			// rules/plan has its own rule; rules' rule is for the engine.
			if !under(p.ImportPath, r.pkg) || (r.pkg == module+"/rules" && under(p.ImportPath, module+"/rules/plan")) {
				continue
			}
			for _, d := range p.Deps {
				if r.forbidden(d) {
					out = append(out, p.ImportPath+" depends on "+d+": "+r.why)
				}
			}
		}
	}
	return out
}

// goList runs `go list -deps -json` on the packages the rules are about.
func goList(t *testing.T) []listedPackage {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list imports: %v", err)
	}
	args := []string{"list", "-deps", "-json=ImportPath,Deps"}
	for _, r := range importRules {
		args = append(args, r.pkg+"/...")
	}
	cmd := exec.Command(gobin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if ours(p.ImportPath) {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// TestImportRules is the acceptance test of the architecture: it fails
// when a package imports what docs/architecture.md says it must not.
func TestImportRules(t *testing.T) {
	pkgs := goList(t)
	for _, want := range []string{"/discovery", "/rules", "/rules/plan", "/labeler", "/plugin", "/plugin/mps", "/cmd/internal/agent"} {
		if !slices.ContainsFunc(pkgs, func(p listedPackage) bool { return p.ImportPath == module+want }) {
			t.Fatalf("go list did not list %s%s", module, want)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestImportRulesCatch checks that each rule reports a violation.
func TestImportRulesCatch(t *testing.T) {
	bad := []listedPackage{
		{module + "/discovery/fakenode", []string{module + "/discovery", module + "/rules/plan"}},
		{module + "/rules/plan", []string{module + "/rules"}},
		{module + "/rules", []string{module + "/rules/plan", module + "/labeler"}},
		{module + "/labeler", []string{module + "/rules/plan", module + "/rules"}},
		{module + "/plugin/mps", []string{module + "/rules/plan", nfdEvaluator}},
	}
	got := violations(bad)
	want := []string{
		module + "/discovery/fakenode depends on " + module + "/rules/plan: discovery imports nothing of featureplug",
		module + "/rules/plan depends on " + module + "/rules: the plan contract imports only discovery",
		module + "/rules depends on " + module + "/labeler: the rules engine does not import the servers of plans",
		module + "/labeler depends on " + module + "/rules: the labeler reads plans only through rules/plan",
		module + "/plugin/mps depends on " + nfdEvaluator + ": the device plugins do not link NFD's rule evaluator",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
