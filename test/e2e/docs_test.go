package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// The cluster the documentation's commands run against.
const (
	// docsNode stands for NODE and gpu-node-7 in the docs: a node whose
	// agent (fake DGX A100) publishes its NodeFeature.
	docsNode = "gpu-node-7"
	// docsGFDNode is migration.md's gpu-node-1: a node still labelled by
	// gpu-feature-discovery, whose labels the label check compares.
	docsGFDNode = "gpu-node-1"
	// docsFakeNode is the fake node standing for both nodes' GPUs.
	docsFakeNode = "dgx-a100"
	// docsBlockTimeout bounds one block of commands.
	docsBlockTimeout = 10 * time.Minute
	// docsDaemonSeconds is how long a long-running command must stay up.
	docsDaemonSeconds = 5
	// docsOnlyEnv, when set, runs the commands of these files only
	// (comma-separated base names: README.md,migration.md), for a quick
	// run after a doc edit.
	docsOnlyEnv = "FEATUREPLUG_DOCS_ONLY"
)

// TestDocsCommands runs the shell commands of README.md and docs/*.md, each
// as docsRules says (docs_commands_test.go), in the docs' order, in a
// working directory that mirrors the repository (builds write there, not
// into the clone), against a cluster of the harness: kube-apiserver, etcd
// and nfd-master, the agents' rules ConfigMap, a node whose agent publishes
// its NodeFeature (gpu-node-7, and NODE), a node labelled as
// gpu-feature-discovery labels it (gpu-node-1), and the GPU Operator's
// time-slicing ConfigMap. The files the commands name (rules.yaml,
// my-rules.yaml, nvidia-config.yaml, my-overlay/, ...) are made from the
// docs' own examples where the docs show them. kubectl is the real one
// (the harness's component), helm renders with helm's library, and both
// turn changes into server-side dry runs (docs_shim_test.go). A command
// fails the test when its exit status is not what its rule expects.
func TestDocsCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master and an agent, and runs the docs' commands")
	}
	bins := harness.RequireBinaries(t, "kubectl")
	api := harness.StartAPIServer(t)
	harness.StartNFDMaster(t, api, nfdMasterNode)
	work := docsWorkDir(t)
	docsCluster(t, api, work)

	shims := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"kubectl", "helm"} {
		script := fmt.Sprintf("#!/bin/sh\nexec env %s=%s %q \"$@\"\n", docsShimEnv, tool, self)
		if err := os.WriteFile(filepath.Join(shims, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(build.agent, filepath.Join(shims, "featureplug")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"PATH="+shims+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+api.KubeconfigPath,
		// An in-cluster configuration must never be picked up by accident.
		"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=",
		// run's state stays in the test's directory, not /var/lib/featureplug.
		"FEATUREPLUG_STATE_DIR="+filepath.Join(t.TempDir(), "state"),
		docsKubectlEnv+"="+bins.Path("kubectl"),
		docsAgentEnv+"="+build.agent,
		docsRootEnv+"="+build.root,
		docsFakeNodesEnv+"="+docsNode+"="+docsFakeNode+","+docsGFDNode+"="+docsFakeNode,
	)
	_, jqErr := exec.LookPath("jq")
	only := os.Getenv(docsOnlyEnv)
	for _, f := range docsFiles(t, build.root) {
		if only != "" && !slices.Contains(strings.Split(only, ","), filepath.Base(f)) {
			continue
		}
		for _, b := range readDocsBlocks(t, f) {
			runDocsBlock(t, b, work, env, jqErr == nil)
		}
	}
}

// docsWorkDir makes the working directory of the docs' commands: every
// top-level entry of the repository linked, bin/ of its own, featureplug/
// the repository (for ../featureplug/manifests in overlays), and the files
// the commands name.
func docsWorkDir(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	entries, err := os.ReadDir(build.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "bin" || e.Name() == ".git" || e.Name() == "featureplug" {
			continue
		}
		if err := os.Symlink(filepath.Join(build.root, e.Name()), filepath.Join(work, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range [][2]string{{build.root, "featureplug"}} {
		if err := os.Symlink(link[0], filepath.Join(work, link[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	read := func(rel string) []byte {
		data, err := os.ReadFile(filepath.Join(build.root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	readme := string(read("README.md"))
	_, rest, _ := strings.Cut(readme, "<!-- explain-example:rules ")
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	exampleRules, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatal("README.md: no example rules file")
	}
	overlay := docsYAMLBlock(t, string(read("docs/deployment.md")), "# my-overlay/kustomization.yaml\napiVersion:")
	files := map[string][]byte{
		// README's example rules file, explained in the README.
		"rules.yaml": []byte(exampleRules),
		// The pools example: deployment.md explains it with pool=inference.
		"my-rules.yaml":  read("manifests/examples/rules/mps-inference-pool.yaml"),
		"new-rules.yaml": read("rules/builtin/mixed.yaml"),
		// NVIDIA device-plugin configs, one per file and named ones.
		"nvidia-config.yaml": read("rules/nvidiaconfig/testdata/time-slicing.yaml"),
		"a.yaml":             []byte("version: v1\nflags: {migStrategy: none}\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n"),
		"b.yaml":             []byte("version: v1\nflags: {migStrategy: mixed}\n"),
		"my-node.yaml":       read("discovery/fakenode/nodes/workstation.yaml"),
		// deployment.md's Helm values file of DeviceClasses, as jq would
		// write it (replaced by the docs' own command where jq is there).
		"classes.json":                  []byte(`{"dra": {"deviceClasses": []}}`),
		"my-overlay/kustomization.yaml": []byte(overlay),
		"my-overlay/rules.yaml":         read("manifests/examples/rules/mps-inference-pool.yaml"),
	}
	for name, data := range files {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return work
}

// docsYAMLBlock returns the ```yaml block of a Markdown text that starts
// with start.
func docsYAMLBlock(t *testing.T, md, start string) string {
	t.Helper()
	_, rest, ok := strings.Cut(md, "```yaml\n"+start)
	if !ok {
		t.Fatalf("no yaml block starting %q", start)
	}
	body, _, _ := strings.Cut(rest, "```\n")
	return start + body
}

// docsCluster prepares what the docs' cluster commands read: the agents'
// rules ConfigMap, the GPU Operator's time-slicing ConfigMap, a node whose
// agent publishes its NodeFeature, and a node labelled by GFD.
func docsCluster(t *testing.T, api *harness.APIServer, work string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	mixed, err := os.ReadFile(filepath.Join(build.root, "rules", "builtin", "mixed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	slicing, err := os.ReadFile(filepath.Join(build.root, "rules", "nvidiaconfig", "testdata", "time-slicing.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "featureplug-rules", Namespace: agentNamespace}, Data: map[string]string{"rules.yaml": string(mixed)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "time-slicing-config", Namespace: "gpu-operator"},
			Data: map[string]string{"any": string(slicing), "default": string(slicing), "a": "version: v1\nflags: {migStrategy: single}\n"}},
	} {
		if err := api.CreateNamespace(ctx, cm.Namespace); err != nil {
			t.Fatal(err)
		}
		if _, err := api.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// gpu-node-7: an agent publishes its NodeFeature with the ConfigMap's
	// rules, as the manifests run it.
	label := func(name string, labels map[string]string) {
		n, err := api.CreateNode(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		n = n.DeepCopy()
		for k, v := range labels {
			n.Labels[k] = v
		}
		if _, err := api.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(docsNode, map[string]string{"pool": "a100"})
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFileAtomic(t, rulesFile, mixed)
	startAgent(t, agentSpec{Node: docsNode, FakeNode: docsFakeNode, Publish: "nodefeature", Rules: rulesFile,
		Kubeconfig: api.KubeconfigPath, Namespace: agentNamespace})
	if err := waitFor(ctx, func() (bool, string) {
		_, err := api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace).Get(ctx, "featureplug-"+docsNode, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		t.Fatalf("no NodeFeature for %s: %v", docsNode, err)
	}

	// gpu-node-1: the labels GFD writes for the same GPUs and rules (the
	// labels are GFD's: labeler/gfd_parity_test.go), plus what other
	// NVIDIA components set, which the label check leaves out.
	out, err := exec.Command(build.agent, "discover", "--fake-node", docsFakeNode, "-o", "labels", "--rules", "mixed").Output()
	if err != nil {
		t.Fatalf("featureplug discover -o labels: %v", err)
	}
	gfd := map[string]string{"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gfd.timestamp": "1733000000"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			gfd[k] = v
		}
	}
	label(docsGFDNode, gfd)
}

// docsPlaceholder matches NODE where the docs use it for a node's name
// (not $NODE, not NODE=).
var docsPlaceholder = regexp.MustCompile(`(^|[^$A-Za-z_])NODE([^A-Za-z_=]|$)`)

// docsCommandText is the command as the test runs it: the placeholders
// NODE and NAMESPACE replaced by the harness's node and a namespace, and
// a fixed metrics port by a free one.
func docsCommandText(t *testing.T, c docsCommand) string {
	t.Helper()
	s := c.text
	for docsPlaceholder.MatchString(s) {
		s = docsPlaceholder.ReplaceAllString(s, "${1}"+docsNode+"${2}")
	}
	s = strings.ReplaceAll(s, "-n NAMESPACE", "-n default")
	if strings.Contains(s, "127.0.0.1:8080") {
		port, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		s = strings.ReplaceAll(s, "127.0.0.1:8080", "127.0.0.1:"+strconv.Itoa(port))
	}
	return s
}

// runDocsBlock runs one block's commands in one shell, so that the
// variables a command sets reach the next, and checks each command's exit
// statuses (every element of a pipeline) against its rule.
func runDocsBlock(t *testing.T, b docsBlock, work string, env []string, haveJQ bool) {
	t.Helper()
	outDir := t.TempDir()
	var script strings.Builder
	script.WriteString("set -u\nexec 3>" + filepath.Join(outDir, "status") + "\n")
	type planned struct {
		c    docsCommand
		rule *docsRule
		text string
	}
	var plan []planned
	for i, c := range b.commands {
		rule := docsRuleFor(c.text)
		if rule == nil {
			t.Errorf("%s: no rule for %q (TestDocsCommandsAreClassified says so too)", b.where, c.text)
			continue
		}
		text := docsCommandText(t, c)
		how := rule.how
		switch {
		case how == docsSkip || (strings.Contains(text, "| jq ") && !haveJQ):
			t.Logf("%s: not run: %s (%s)", b.where, c.text, rule.why)
			continue
		case how == docsMakeDryRun:
			text = regexp.MustCompile(`(^|&& )make `).ReplaceAllString(text, "${1}make -n ")
		case how == docsDaemon:
			text = fmt.Sprintf("timeout -s TERM %d %s", docsDaemonSeconds, text)
		}
		out := filepath.Join(outDir, fmt.Sprintf("out.%d", i))
		fmt.Fprintf(&script, "{ %s\n__ps=\"${PIPESTATUS[*]}\"; } >%s 2>&1 </dev/null\necho \"%d $__ps\" >&3\n", text, out, i)
		plan = append(plan, planned{c, rule, text})
	}
	ctx, cancel := context.WithTimeout(context.Background(), docsBlockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir, cmd.Env = work, env
	shellOut, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: the block's shell failed: %v\n%s", b.where, err, shellOut)
	}
	statusData, _ := os.ReadFile(filepath.Join(outDir, "status"))
	statuses := map[int][]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(statusData)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		i, _ := strconv.Atoi(fields[0])
		for _, f := range fields[1:] {
			n, _ := strconv.Atoi(f)
			statuses[i] = append(statuses[i], n)
		}
	}
	for _, p := range plan {
		i := slicesIndex(b.commands, p.c)
		st, ran := statuses[i]
		output, _ := os.ReadFile(filepath.Join(outDir, fmt.Sprintf("out.%d", i)))
		last := -1
		if len(st) > 0 {
			last = st[len(st)-1]
		}
		var problem string
		switch {
		case !ran:
			problem = "did not run (the shell stopped before it)"
		case p.c.expectError || p.rule.how == docsFail:
			if last == 0 {
				problem = "succeeded, but the docs say it fails"
			}
		case p.rule.how == docsAnyExit:
		case p.rule.how == docsDaemon:
			if last != 124 {
				problem = fmt.Sprintf("exited with %d before %d s; it should keep running", last, docsDaemonSeconds)
			}
		default:
			for j, s := range st {
				// A pipeline's reader may stop early (head): SIGPIPE.
				if s != 0 && (j == len(st)-1 || s != 141) {
					problem = fmt.Sprintf("exit statuses %v", st)
					break
				}
			}
		}
		if problem != "" {
			t.Errorf("%s:%d: %s\n  ran: %s\n  rule: %s\n  output:\n%s", filepath.Base(strings.Split(b.where, ":")[0]), p.c.line, problem, p.text, p.rule.why, docsTail(output))
		} else {
			t.Logf("%s:%d: ok: %s", strings.Split(b.where, ":")[0], p.c.line, p.c.text)
		}
	}
}

// slicesIndex returns the index of c in cs.
func slicesIndex(cs []docsCommand, c docsCommand) int {
	for i := range cs {
		if cs[i] == c {
			return i
		}
	}
	return -1
}

// docsTail is the end of a command's output, indented.
func docsTail(out []byte) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}
