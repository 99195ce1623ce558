package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The documentation's shell commands: every ```sh block of README.md and
// docs/*.md, split into commands, each handled as docsRules says. A command
// no rule knows fails the test, so a new kind of command in the docs needs
// a rule here, and a doc edit cannot drop out of the test silently.

// docsFiles are the Markdown files whose commands TestDocsCommands runs,
// relative to the repository root.
func docsFiles(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

// docsBlock is one ```sh block.
type docsBlock struct {
	// where is file:line of the block's first command line.
	where    string
	commands []docsCommand
}

// docsCommand is one command of a block: its text with continuation lines
// joined and comments removed.
type docsCommand struct {
	line int
	text string
	// expectError is set when the comment after the command shows an
	// error ("# Error: ..."): the command must fail.
	expectError bool
}

// readDocsBlocks extracts the sh blocks of a Markdown file.
func readDocsBlocks(t *testing.T, path string) []docsBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read-only
	var blocks []docsBlock
	var cur *docsBlock
	var pending strings.Builder
	pendingLine := 0
	flush := func() {
		if s := strings.TrimSpace(pending.String()); s != "" {
			cur.commands = append(cur.commands, docsCommand{line: pendingLine, text: s})
		}
		pending.Reset()
	}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```sh":
			cur = &docsBlock{where: fmt.Sprintf("%s:%d", filepath.Base(path), n+1)}
			continue
		case cur == nil:
			continue
		case strings.TrimSpace(line) == "```":
			flush()
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		code, comment := splitShellComment(line)
		if strings.TrimSpace(code) == "" {
			if strings.HasPrefix(strings.TrimSpace(comment), "Error:") && pending.Len() == 0 && len(cur.commands) > 0 {
				cur.commands[len(cur.commands)-1].expectError = true
			}
			continue
		}
		if pending.Len() == 0 {
			pendingLine = n
		}
		code = strings.TrimRight(code, " \t")
		switch {
		case strings.HasSuffix(code, "\\"):
			pending.WriteString(strings.TrimSuffix(code, "\\") + " ")
		case strings.HasSuffix(code, "|") || strings.HasSuffix(code, "&&"):
			pending.WriteString(code + " ")
		default:
			pending.WriteString(code)
			flush()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s: unterminated ```sh block at %s", path, cur.where)
	}
	return blocks
}

// splitShellComment splits a shell line at its comment: a '#' outside
// quotes at the start or after a blank.
func splitShellComment(line string) (code, comment string) {
	var quote rune
	prev := ' '
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return line[:i], line[i+1:]
		}
		prev = r
	}
	return line, ""
}

// docsHow is what the test does with a command.
type docsHow int

const (
	// docsRun runs it; it must exit 0.
	docsRun docsHow = iota
	// docsFail runs it; it must fail (a documented error).
	docsFail
	// docsAnyExit runs it; its answer is its output, whatever the exit.
	docsAnyExit
	// docsDaemon runs a long-running command: it must still run after a
	// few seconds, and stops on SIGTERM.
	docsDaemon
	// docsMakeDryRun runs make -n with the same arguments: the target and
	// its variables must exist.
	docsMakeDryRun
	// docsSkip does not run it; the rule says why.
	docsSkip
)

// docsRule matches commands and says how they are run, and why.
type docsRule struct {
	match func(cmd string) bool
	how   docsHow
	why   string
}

// re matches a command by regular expression.
func re(expr string) func(string) bool { return regexp.MustCompile(expr).MatchString }

// docsRules decide, first match, how each command of the docs runs. The
// whole test runs against the harness (etcd, kube-apiserver, nfd-master,
// and agents on fake nodes), so commands that need a cluster run against
// it; see TestDocsCommands for what it prepares and what the kubectl and
// helm on PATH do.
var docsRules = []docsRule{
	{re(`^make (test|e2e|unit|faults|scale)\b`), docsSkip, "the test suite itself: CI runs it"},
	{re(`^make (bench|bench-go|bench-process|bench-profile|image|image-push|fuzz)\b`), docsMakeDryRun,
		"minutes long, or needs a container engine and a registry: make -n checks the targets and variables"},
	{re(`^make( |$)`), docsRun, "the README's entry points"},
	{re(`^(bin/)?featureplug run\b`), docsDaemon, "the agent: up after a few seconds, stops on SIGTERM"},
	{re(`^(bin/)?featureplug health\b`), docsFail, "reads a running agent's device health; none serves that address while the test runs: it must say so and exit non-zero"},
	{needsGPU, docsFail, "reads the machine's NVIDIA driver, which the test machine lacks: it must say so and exit non-zero"},
	{re(`^containerd `), docsSkip, "runs on a GPU node (containerd's configuration)"},
	{re(`^rm /etc/`), docsSkip, "runs on a GPU node, as root"},
	{re(`^kubectl patch clusterpolicies\.nvidia\.com`), docsSkip, "needs the GPU Operator's ClusterPolicy"},
	{re(`^helm upgrade gpu-operator nvidia/`), docsSkip, "needs NVIDIA's chart repository and the GPU Operator"},
	{re(`^kubectl( -n \S+)? (logs|wait)\b`), docsSkip, "needs a kubelet running the pods"},
	{re(`^kubectl get runtimeclass\b`), docsAnyExit, "found or NotFound: the answer is the output"},
	{re(`^go test .*-bench`), docsSkip, "a benchmark run (minutes): make bench runs it"},
	{re(`\| jq `), docsRun, "needs jq; skipped where it is not installed"},
	{re(`^(bin/)?featureplug(-bench)? `), docsRun, "featureplug's commands; those with --node and rules diff read the harness's cluster"},
	{re(`^kubectl `), docsRun, "against the harness's kube-apiserver (changes as server-side dry runs; run as the image's entry point on a fake node)"},
	{re(`^helm (install|upgrade|template) `), docsRun, "renders the chart as helm does and applies it as a server-side dry run"},
	{re(`^go (build|tool|list) `), docsRun, "builds and inspects the binaries"},
	{re(`^GODEBUG=\S+ bin/featureplug `), docsRun, "the binary's start-up trace"},
	{re(`^diff \S+ \S+`), docsRun, "compares what the commands before wrote"},
	{re(`^[A-Z_]+=\S*$|^[A-Z_]+=\$\(`), docsRun, "a shell variable the next commands use"},
}

// needsGPU reports whether a featureplug command reads this machine's
// NVIDIA driver: discover or explain without --fake-node (and without
// --node, which reads the cluster).
func needsGPU(cmd string) bool {
	m := regexp.MustCompile(`^(bin/)?featureplug (discover|rules explain)\b`).FindString(cmd)
	return m != "" && !strings.Contains(cmd, "--fake-node") && !strings.Contains(cmd, "--node ")
}

// docsRuleFor returns the rule of a command, or nil.
func docsRuleFor(cmd string) *docsRule {
	for i := range docsRules {
		if docsRules[i].match(cmd) {
			return &docsRules[i]
		}
	}
	return nil
}

// TestDocsCommandsAreClassified needs no cluster: every command of the docs
// has a rule, so none is left out of TestDocsCommands unnoticed.
func TestDocsCommandsAreClassified(t *testing.T) {
	root, err := productRoot()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range docsFiles(t, root) {
		for _, b := range readDocsBlocks(t, f) {
			for _, c := range b.commands {
				total++
				r := docsRuleFor(c.text)
				if r != nil {
					t.Logf("%s:%d: %s [%d: %s]", filepath.Base(f), c.line, c.text, r.how, r.why)
				}
				if r == nil {
					t.Errorf("%s:%d: no rule in docsRules for %q: say in docs_commands_test.go how the test runs it", filepath.Base(f), c.line, c.text)
				}
			}
		}
	}
	if total < 50 {
		t.Errorf("only %d commands found in the docs: the extraction is broken", total)
	}
}
