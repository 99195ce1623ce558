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
	// Imports are its direct imports, TestImports and XTestImports those
	// of its tests.
	Imports, TestImports, XTestImports []string
}

// fsnotify is the inotify library; only the one file watcher may import it.
const fsnotify = "github.com/fsnotify/fsnotify"

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
	{module + "/plugin", "the kubelet-facing packages read plans only through rules/plan", func(d string) bool {
		return (under(d, module+"/rules") && !under(d, module+"/rules/plan")) || under(d, module+"/labeler") ||
			under(d, module+"/cmd")
	}},
	{module + "/labeler", "the labeler does not link NFD's rule evaluator", func(d string) bool { return under(d, nfdEvaluator) }},
	{module + "/plugin", "the kubelet-facing packages do not link NFD's rule evaluator", func(d string) bool { return under(d, nfdEvaluator) }},
	{module + "/cmd/internal/agent", "the agent serves plans: it reads them through rules/plan and is given the rules engine (cmd/internal/rulesengine)", func(d string) bool {
		return (under(d, module+"/rules") && !under(d, module+"/rules/plan")) || under(d, nfdEvaluator)
	}},
	{module + "/cmd/internal/events", "the Event recorder is plumbing: it knows no sink and no rules", func(d string) bool {
		return under(d, module+"/rules") || under(d, module+"/plugin") || under(d, module+"/labeler") || under(d, module+"/cmd/internal/agent")
	}},
	{module + "/cmd/internal/agentconfig", "the agent's configuration names the option types of its parts, never the rules engine or the loop", func(d string) bool {
		return (under(d, module+"/rules") && !under(d, module+"/rules/plan")) || under(d, nfdEvaluator) || under(d, module+"/cmd/internal/agent")
	}},
	{module + "/cmd/internal/gctune", "the collector's tuning is plumbing: it knows no package of ours", func(d string) bool { return ours(d) }},
	{module + "/cmd/internal/kube", "the API client does not link the rules engine", func(d string) bool {
		return (under(d, module+"/rules") && !under(d, module+"/rules/plan")) || under(d, nfdEvaluator) || under(d, module+"/cmd/internal/agent")
	}},
}

// directRule is a rule on direct imports across the module: only the
// packages allowed may import pkg.
type directRule struct {
	pkg     string
	why     string
	allowed func(importer string) bool
}

// directRules are the rules of docs/architecture.md on direct imports.
var directRules = []directRule{
	{fsnotify, "inotify is used by one file watcher (discovery/fswatch): one instance per agent, one periodic check for every watch", func(p string) bool {
		return p == module+"/discovery/fswatch"
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
		// Tests are held to the rules on direct imports too.
		imports := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		for _, r := range directRules {
			if slices.Contains(imports, r.pkg) && !r.allowed(p.ImportPath) {
				out = append(out, p.ImportPath+" imports "+r.pkg+": "+r.why)
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
	args := []string{"list", "-deps", "-json=ImportPath,Deps,Imports,TestImports,XTestImports", module + "/..."}
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
	for _, want := range []string{"/discovery", "/discovery/fswatch", "/discovery/statedir", "/discovery/gpusource",
		"/rules", "/rules/plan", "/labeler", "/plugin/deviceplugin", "/plugin/health", "/plugin/dra", "/plugin/cdi", "/plugin/mps",
		"/cmd/internal/agent", "/cmd/internal/agentconfig", "/cmd/internal/gctune", "/cmd/internal/events", "/cmd/internal/kube"} {
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
		{ImportPath: module + "/discovery/fakenode", Deps: []string{module + "/discovery", module + "/rules/plan"}},
		{ImportPath: module + "/rules/plan", Deps: []string{module + "/rules"}},
		{ImportPath: module + "/rules", Deps: []string{module + "/rules/plan", module + "/labeler"}},
		{ImportPath: module + "/labeler", Deps: []string{module + "/rules/plan", module + "/rules"}},
		{ImportPath: module + "/plugin/mps", Deps: []string{module + "/rules/plan", nfdEvaluator}},
		{ImportPath: module + "/plugin/deviceplugin", Imports: []string{fsnotify}},
	}
	got := violations(bad)
	want := []string{
		module + "/discovery/fakenode depends on " + module + "/rules/plan: discovery imports nothing of featureplug",
		module + "/rules/plan depends on " + module + "/rules: the plan contract imports only discovery",
		module + "/rules depends on " + module + "/labeler: the rules engine does not import the servers of plans",
		module + "/labeler depends on " + module + "/rules: the labeler reads plans only through rules/plan",
		module + "/plugin/mps depends on " + nfdEvaluator + ": the kubelet-facing packages do not link NFD's rule evaluator",
		module + "/plugin/deviceplugin imports " + fsnotify + ": inotify is used by one file watcher (discovery/fswatch): one instance per agent, one periodic check for every watch",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
