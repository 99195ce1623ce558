package e2e

// Fault tests of the agent daemon: the rules file is followed through directory re-creation,
// symlinks, loss, slow writers and SIGHUP, with or without inotify; the
// feature file is repaired; /healthz fails while the agent loop is stuck.
// Each runs the real featureplug process over real sockets, against the
// kubelet's own device manager and, for Events, the real kube-apiserver.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/featureplug/featureplug/test/harness"
)

// agentFaultNoInotifyEnv makes the agent's file watches find no inotify
// instance (the test hook of `featureplug run`, see cmd/featureplug/run.go).
const agentFaultNoInotifyEnv = "FEATUREPLUG_TEST_NO_INOTIFY"

// agentFaultRules serves every whole GPU as resource.
func agentFaultRules(resource string) string {
	return fmt.Sprintf(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: all
  devices: gpu
  resource: %s
`, resource)
}

// agentFaultSplitRules serves GPUs 0-3 as first and, when second is not
// empty, GPUs 4-7 as second. Cut after its first rule, the file is still
// valid: that is the half a slow writer leaves.
func agentFaultSplitRules(first, second string) string {
	s := fmt.Sprintf(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: first
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      index: {op: In, value: ["0", "1", "2", "3"]}
  resource: %s
`, first)
	if second != "" {
		s += fmt.Sprintf(`- name: second
  devices: gpu
  resource: %s
`, second)
	}
	return s
}

// agentFaultEnv is one agent on the 8-GPU dgx-h100 fake node with the
// kubelet's device manager.
type agentFaultEnv struct {
	a    *agent
	peer *harness.KubeletPeer
}

func agentFaultStart(t *testing.T, spec agentSpec) *agentFaultEnv {
	t.Helper()
	dir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, dir)
	if spec.FakeNode == "" {
		spec.FakeNode = "dgx-h100"
	}
	spec.KubeletDir = dir
	return &agentFaultEnv{a: startAgent(t, spec), peer: peer}
}

// serves waits until the kubelet sees each resource with its count of
// devices, all allocatable.
func (e *agentFaultEnv) serves(t *testing.T, want map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for res, n := range want {
		if err := e.peer.WaitCapacity(ctx, res, n, n); err != nil {
			t.Fatalf("kubelet: %v", err)
		}
	}
}

// checkServes checks, without waiting, that the kubelet sees each resource
// with its count of devices.
func (e *agentFaultEnv) checkServes(t *testing.T, what string, want map[string]int64) {
	t.Helper()
	for res, n := range want {
		if c, al := e.peer.Capacity(res); c != n || al != n {
			t.Errorf("%s: %s has capacity %d, allocatable %d; want %d, %d", what, res, c, al, n, n)
		}
	}
}

// agentFaultLog returns the agent's log so far.
func agentFaultLog(t *testing.T, a *agent) string {
	t.Helper()
	b, err := os.ReadFile(a.LogPath)
	if err != nil {
		t.Fatalf("reading the agent's log: %v", err)
	}
	return string(b)
}

// agentFaultLogLines returns the log lines containing every one of subs.
func agentFaultLogLines(t *testing.T, a *agent, subs ...string) []string {
	t.Helper()
	var out []string
lines:
	for _, line := range strings.Split(agentFaultLog(t, a), "\n") {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue lines
			}
		}
		out = append(out, line)
	}
	return out
}

// agentFaultWaitLog waits for a log line containing every one of subs.
func agentFaultWaitLog(t *testing.T, a *agent, subs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		return len(agentFaultLogLines(t, a, subs...)) > 0, fmt.Sprintf("no log line with %q", subs)
	}); err != nil {
		t.Fatalf("featureplug for node %s: %v", a.spec.Node, err)
	}
}

// agentFaultConfigMap lays out dir as the kubelet lays out a ConfigMap
// volume: rules.yaml -> ..data/rules.yaml, ..data -> ..<n>, swapped
// atomically on update.
type agentFaultConfigMap struct {
	t   *testing.T
	dir string
	n   int
}

// path is the rules file as the agent is told it.
func (v *agentFaultConfigMap) path() string { return filepath.Join(v.dir, "rules.yaml") }

// publish swaps in a new ..data holding content, or no rules.yaml when
// content is empty.
func (v *agentFaultConfigMap) publish(content string) {
	v.t.Helper()
	if err := os.MkdirAll(v.dir, 0o755); err != nil {
		v.t.Fatal(err)
	}
	v.n++
	ts := filepath.Join(v.dir, fmt.Sprintf("..2026_11_30_00_00_%02d", v.n))
	if err := os.Mkdir(ts, 0o755); err != nil {
		v.t.Fatal(err)
	}
	if content != "" {
		if err := os.WriteFile(filepath.Join(ts, "rules.yaml"), []byte(content), 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	v.link()
}

// link creates the rules.yaml -> ..data/rules.yaml link when it is missing.
func (v *agentFaultConfigMap) link() {
	v.t.Helper()
	if _, err := os.Lstat(v.path()); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "rules.yaml"), v.path()); err != nil {
			v.t.Fatal(err)
		}
	}
}

// TestFault02RulesDirRecreated: the rules ConfigMap volume's directory is
// deleted and re-created (a remount), twice; each time the new rules are
// applied, through file events alone (the periodic check is off).
func TestFault02RulesDirRecreated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	root := shortTempDir(t)
	cm := &agentFaultConfigMap{t: t, dir: filepath.Join(root, "volumes", "rules")}
	cm.publish(agentFaultRules("example.com/a"))
	e := agentFaultStart(t, agentSpec{Node: "fault-rules-dir", Rules: cm.path(),
		Extra: []string{"--file-check-interval", "1h"}})
	e.serves(t, map[string]int64{"example.com/a": 8})

	for i, res := range []string{"example.com/b", "example.com/c"} {
		if err := os.RemoveAll(filepath.Join(root, "volumes")); err != nil {
			t.Fatal(err)
		}
		e.a.waitMetric(t, "featureplug_rules_file_missing", func(v float64) bool { return v == 1 })
		cm.n = 10 * (i + 1)
		start := time.Now()
		cm.publish(agentFaultRules(res))
		e.serves(t, map[string]int64{res: 8})
		t.Logf("round %d: %s served %s after the directory was re-created", i+1, res, time.Since(start).Round(time.Millisecond))
		e.a.waitMetric(t, "featureplug_rules_file_missing", func(v float64) bool { return v == 0 })
	}
	// And the re-created volume is still watched for ordinary updates.
	cm.publish(agentFaultRules("example.com/d"))
	e.serves(t, map[string]int64{"example.com/d": 8})
	if got := e.a.metric(t, "featureplug_rule_reloads_total", `result="applied"`); got != 4 {
		t.Errorf("featureplug_rule_reloads_total{result=applied} = %v, want 4 (start and three updates)", got)
	}
}

// TestFault03RulesSymlinkTargetEdited: --rules is a symlink whose target,
// in another directory, is edited in place; the edit is applied through
// file events alone (the periodic check is off).
func TestFault03RulesSymlinkTargetEdited(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	root := shortTempDir(t)
	for _, d := range []string{"etc", "srv"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(root, "srv", "rules.yaml")
	if err := os.WriteFile(target, []byte(agentFaultRules("example.com/a")), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "etc", "rules.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	e := agentFaultStart(t, agentSpec{Node: "fault-rules-link", Rules: link,
		Extra: []string{"--file-check-interval", "1h"}})
	e.serves(t, map[string]int64{"example.com/a": 8})

	// In place: same inode, same directory entry, nothing renamed.
	if err := os.WriteFile(target, []byte(agentFaultRules("example.com/b")), 0o644); err != nil {
		t.Fatal(err)
	}
	e.serves(t, map[string]int64{"example.com/b": 8})
	// The kubelet keeps a withdrawn resource's capacity for a while; none
	// of it is allocatable.
	if _, al := e.peer.Capacity("example.com/a"); al != 0 {
		t.Errorf("example.com/a still has %d allocatable devices after the edit", al)
	}
}

// TestFault03RulesReloadOnSIGHUP: without inotify and with the periodic
// check off, only SIGHUP can make the agent see an edit of the rules file;
// it does, as well as re-discovering the GPUs.
func TestFault03RulesReloadOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	t.Setenv(agentFaultNoInotifyEnv, "1")
	path := filepath.Join(shortTempDir(t), "rules.yaml")
	writeFileAtomic(t, path, []byte(agentFaultRules("example.com/a")))
	e := agentFaultStart(t, agentSpec{Node: "fault-rules-hup", Rules: path,
		Extra: []string{"--file-check-interval", "1h"}})
	e.serves(t, map[string]int64{"example.com/a": 8})
	discoveries := e.a.metric(t, "featureplug_discoveries_total", `result="ok"`)

	writeFileAtomic(t, path, []byte(agentFaultRules("example.com/b")))
	e.a.hup(t)
	e.serves(t, map[string]int64{"example.com/b": 8})
	agentFaultWaitLog(t, e.a, "re-reading the rules file on signal")
	if got := e.a.metric(t, "featureplug_discoveries_total", `result="ok"`); got <= discoveries {
		t.Errorf("featureplug_discoveries_total{result=ok} stayed at %v after SIGHUP, want a re-discovery too", got)
	}
}

// TestFault04RulesFileLost: the rules file goes missing from a new ..data,
// is deleted, and is replaced by a directory. Each time the last good plan
// keeps serving, and the agent says so: a WARN, featureplug_rules_file_missing
// at 1, featureplug_rule_reloads_total{result="missing"}, and a Warning
// Event RulesFileMissing on the Node (through the real kube-apiserver).
// When the file is back it is applied and the gauge returns to 0.
func TestFault04RulesFileLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and featureplug")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitTimeout)
	defer cancel()
	const node = "fault-rules-lost"
	if _, err := api.CreateNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	cm := &agentFaultConfigMap{t: t, dir: shortTempDir(t)}
	cm.publish(agentFaultRules("example.com/a"))
	e := agentFaultStart(t, agentSpec{Node: node, Rules: cm.path(), Kubeconfig: api.KubeconfigPath})
	e.serves(t, map[string]int64{"example.com/a": 8})

	events := func() int {
		list, err := api.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": node, "reason": "RulesFileMissing"}.String(),
		})
		if err != nil {
			t.Fatalf("listing Events: %v", err)
		}
		// client-go's recorder folds a repeated Event (same message) into
		// one object with a count: count occurrences, not objects.
		n := 0
		for _, ev := range list.Items {
			if ev.Type != "Warning" || ev.InvolvedObject.Kind != "Node" || !strings.Contains(ev.Message, "serving the last good plan (1 resources)") {
				t.Errorf("Event %s: type %s, object %s, message %q; want a Warning on the Node saying the last plan serves",
					ev.Name, ev.Type, ev.InvolvedObject.Kind, ev.Message)
			}
			n += int(max(ev.Count, 1))
		}
		return n
	}

	for i, tc := range []struct {
		name       string
		lose       func()
		restore    func(content string)
		errPart    string
		resourceTo string
	}{
		{
			name: "missing from a new ..data",
			lose: func() { cm.publish("") },
			restore: func(content string) {
				cm.publish(content)
			},
			errPart: "does not exist", resourceTo: "example.com/b",
		},
		{
			name: "deleted",
			lose: func() {
				if err := os.Remove(cm.path()); err != nil {
					t.Fatal(err)
				}
			},
			restore: func(content string) {
				cm.publish(content)
			},
			errPart: "does not exist", resourceTo: "example.com/c",
		},
		{
			name: "replaced by a directory",
			lose: func() {
				if err := os.Remove(cm.path()); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(cm.path(), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			restore: func(content string) {
				if err := os.Remove(cm.path()); err != nil {
					t.Fatal(err)
				}
				cm.publish(content)
			},
			errPart: "is a directory", resourceTo: "example.com/d",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served := map[string]int64{"example.com/a": 8}
			if i > 0 {
				served = map[string]int64{[]string{"example.com/b", "example.com/c"}[i-1]: 8}
			}
			tc.lose()
			e.a.waitMetric(t, "featureplug_rules_file_missing", func(v float64) bool { return v == 1 })
			e.a.waitMetric(t, "featureplug_rule_reloads_total", func(v float64) bool { return v == float64(i+1) }, `result="missing"`)
			agentFaultWaitLog(t, e.a, "level=WARN", "rules file lost; keeping the last good plan (1 resources)", tc.errPart)
			waitCtx, done := context.WithTimeout(ctx, waitTimeout)
			defer done()
			if err := waitFor(waitCtx, func() (bool, string) {
				n := events()
				return n == i+1, fmt.Sprintf("%d RulesFileMissing Events on node %s, want %d", n, node, i+1)
			}); err != nil {
				t.Fatal(err)
			}
			e.checkServes(t, "while the rules file is lost", served)

			tc.restore(agentFaultRules(tc.resourceTo))
			e.serves(t, map[string]int64{tc.resourceTo: 8})
			e.a.waitMetric(t, "featureplug_rules_file_missing", func(v float64) bool { return v == 0 })
		})
	}
}

// TestFault10Healthz: /healthz answers 200 while the agent loop makes
// progress and 503, naming the loop, while it is held still (the fake
// node's /fake/stall test hook), and recovers once it is released.
func TestFault10Healthz(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	e := agentFaultStart(t, agentSpec{Node: "fault-healthz", Rules: "single",
		Extra: []string{"--liveness-timeout", "2s"}})
	e.serves(t, map[string]int64{"nvidia.com/gpu": 8})
	post := func(path string) {
		t.Helper()
		c := &http.Client{Timeout: waitTimeout}
		resp, err := c.Post(e.a.base+path, "", nil)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST %s: %s", path, resp.Status)
		}
	}
	waitHealthz := func(code int, bodyPart string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := waitFor(ctx, func() (bool, string) {
			got, body, err := e.a.get("/healthz")
			if err != nil {
				return false, err.Error()
			}
			return got == code && strings.Contains(body, bodyPart), fmt.Sprintf("/healthz: %d %q", got, body)
		}); err != nil {
			t.Fatalf("waiting for /healthz %d %q: %v", code, bodyPart, err)
		}
	}

	// Idle for three times the timeout: the loop's own heartbeat keeps it
	// live all along.
	idle := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		code, body, err := e.a.get("/healthz")
		if err != nil || code != http.StatusOK {
			t.Fatalf("/healthz of an idle agent: %d %q %v", code, body, err)
		}
		return time.Since(idle) > 6*time.Second, "idle"
	}); err != nil {
		t.Fatal(err)
	}

	post("/fake/stall")
	waitHealthz(http.StatusServiceUnavailable, "agent loop: no progress for")
	// Serving does not depend on the loop: the kubelet still sees every GPU.
	e.checkServes(t, "while the loop is stuck", map[string]int64{"nvidia.com/gpu": 8})
	post("/fake/stall?release")
	waitHealthz(http.StatusOK, "ok")
}

// TestFault12FeatureFileDeleted: the feature file (--publish file) deleted,
// edited, or its whole directory removed, is rewritten by the agent at once
// through its file watch, not at the 1 h resync; without inotify, the next
// re-discovery rewrites it.
func TestFault12FeatureFileDeleted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	run := func(t *testing.T, extra ...string) {
		dir := filepath.Join(shortTempDir(t), "features.d")
		file := filepath.Join(dir, "featureplug")
		a := startAgent(t, agentSpec{Node: "fault-features", FakeNode: "dgx-h100", Publish: "file", Rules: "single",
			Extra: append([]string{"--features-file", file, "--resync-interval", "1h"}, extra...)})
		var want []byte
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := waitFor(ctx, func() (bool, string) {
			b, err := os.ReadFile(file)
			want = b
			return err == nil && strings.Contains(string(b), "nvidia.com/gpu.count=8"), fmt.Sprintf("feature file: %v", err)
		}); err != nil {
			t.Fatal(err)
		}
		rewritten := func(what string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			if err := waitFor(ctx, func() (bool, string) {
				b, err := os.ReadFile(file)
				return err == nil && string(b) == string(want), fmt.Sprintf("feature file: %d bytes, %v", len(b), err)
			}); err != nil {
				t.Fatalf("after the feature file was %s: %v", what, err)
			}
		}
		writes := a.metric(t, "featureplug_publish_writes_total")

		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		rewritten("deleted")
		agentFaultWaitLog(t, a, "level=WARN", "feature file was deleted; rewriting it")

		if err := os.WriteFile(file, []byte("nvidia.com/gpu.count=1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rewritten("edited")
		agentFaultWaitLog(t, a, "level=WARN", "feature file was changed by someone else; rewriting it")

		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		rewritten("removed with its directory")
		if got := a.metric(t, "featureplug_publish_writes_total"); got != writes+3 {
			t.Errorf("featureplug_publish_writes_total went from %v to %v, want three rewrites", writes, got)
		}
	}
	t.Run("FileWatch", func(t *testing.T) {
		run(t, "--rediscover-interval", "1h", "--file-check-interval", "1h")
	})
	t.Run("Rediscovery", func(t *testing.T) {
		t.Setenv(agentFaultNoInotifyEnv, "1")
		run(t, "--rediscover-interval", "500ms", "--file-check-interval", "1h")
	})
}

// TestFault14SlowWriter: a writer rewrites the rules file in place, pausing
// half-way with a valid file (its first rule only); only the complete
// file's plan is ever applied.
func TestFault14SlowWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	path := filepath.Join(shortTempDir(t), "rules.yaml")
	writeFileAtomic(t, path, []byte(agentFaultSplitRules("example.com/first", "example.com/second")))
	e := agentFaultStart(t, agentSpec{Node: "fault-slow-writer", Rules: path,
		Extra: []string{"--file-settle", "1500ms"}})
	e.serves(t, map[string]int64{"example.com/first": 4, "example.com/second": 4})
	applied := e.a.metric(t, "featureplug_rule_reloads_total", `result="applied"`)

	full := agentFaultSplitRules("example.com/first", "example.com/third")
	half := agentFaultSplitRules("example.com/first", "")
	if !strings.HasPrefix(full, half) {
		t.Fatal("the half file is not a prefix of the full one")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(half); err != nil {
		t.Fatal(err)
	}
	// The agent has read the half file (and waits for it to settle):
	// the writer goes on.
	agentFaultWaitLog(t, e.a, "rules file", "waiting for it to settle", fmt.Sprintf("bytes=%d ", len(half)))
	if _, err := f.WriteString(full[len(half):]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	e.serves(t, map[string]int64{"example.com/first": 4, "example.com/third": 4})
	if got := e.a.metric(t, "featureplug_rule_reloads_total", `result="applied"`); got != applied+1 {
		t.Errorf("featureplug_rule_reloads_total{result=applied} went from %v to %v; want one reload, the complete file", applied, got)
	}
	for _, line := range agentFaultLogLines(t, e.a, "plan applied", "trigger=rules") {
		if !strings.Contains(line, "example.com/third") {
			t.Errorf("a plan without example.com/third was applied: %s", line)
		}
	}
}

// TestFault16InotifyExhausted: with no inotify instance to be had (as when
// fs.inotify.max_user_instances is exhausted), the agent starts, serves,
// warns once, sets featureplug_file_watch_fallback, logs none of the old
// misleading errors, and picks up a rules edit through its periodic check.
func TestFault16InotifyExhausted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	t.Setenv(agentFaultNoInotifyEnv, "1")
	path := filepath.Join(shortTempDir(t), "rules.yaml")
	writeFileAtomic(t, path, []byte(agentFaultRules("example.com/a")))
	e := agentFaultStart(t, agentSpec{Node: "fault-inotify", Rules: path,
		Extra: []string{"--file-check-interval", "500ms"}})
	e.serves(t, map[string]int64{"example.com/a": 8})
	if got := e.a.metric(t, "featureplug_file_watch_fallback", `file="rules"`); got != 1 {
		t.Errorf(`featureplug_file_watch_fallback{file="rules"} = %v, want 1`, got)
	}

	start := time.Now()
	writeFileAtomic(t, path, []byte(agentFaultRules("example.com/b")))
	e.serves(t, map[string]int64{"example.com/b": 8})
	t.Logf("without inotify, the edit was served %s later (--file-check-interval 500ms)", time.Since(start).Round(time.Millisecond))
	if !e.a.Running() {
		t.Fatalf("featureplug exited: %v", e.a.ExitErr())
	}
	if n := len(agentFaultLogLines(t, e.a, "level=WARN", "no inotify instance to watch the rules file")); n != 1 {
		t.Errorf("%d warnings about the missing inotify instance, want 1", n)
	}
	for _, misleading := range []string{"rules rejected", "Apply after Run returned"} {
		if lines := agentFaultLogLines(t, e.a, misleading); len(lines) > 0 {
			t.Errorf("log has %q: %s", misleading, lines[0])
		}
	}
}
