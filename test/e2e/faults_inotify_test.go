package e2e

// Fault tests of an agent whose user has no inotify instance left:
// fs.inotify.max_user_instances exhausted by another process of the same
// user before the agent starts, then freed.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// inotifyHogEnv, set to 1, makes the test binary an inotify hog instead
// of a test run: it takes inotify instances until the kernel refuses one,
// prints how many it took, and holds them until its stdin closes.
const inotifyHogEnv = "FEATUREPLUG_E2E_INOTIFY_HOG"

// inotifyUser is the unprivileged user the agent and the hog run as, so
// that the exhausted instances are that user's alone, not the tests'.
const inotifyUser = 65534

func init() {
	if os.Getenv(inotifyHogEnv) == "1" {
		inotifyHog()
	}
}

// inotifyHog is the hog's whole life (see inotifyHogEnv).
func inotifyHog() {
	n := 0
	for {
		if _, err := syscall.InotifyInit1(syscall.IN_CLOEXEC); err != nil {
			break
		}
		n++
	}
	fmt.Println(n)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// inotifyEnv is an agent running as inotifyUser with a hog of the same
// user holding every inotify instance.
type inotifyEnv struct {
	t       *testing.T
	dir     string
	kubelet *kubeletsim.Kubelet
	agent   *agent
	hog     *exec.Cmd
	hogIn   io.WriteCloser
}

// inotifyCopy copies the executable at src into dir, readable and
// executable by every user (the test binaries live in directories only
// root may enter).
func inotifyCopy(t *testing.T, src, dir string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// inotifyStart exhausts inotifyUser's instances, then starts a simulated
// kubelet and an agent as that user, checking periodically every
// interval.
func inotifyStart(t *testing.T, interval time.Duration) *inotifyEnv {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root, to run the agent and the hog as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to run the agent as another user")
	}
	e := &inotifyEnv{t: t, dir: shortTempDir(t)}
	bin := filepath.Join(shortTempDir(t), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(shortTempDir(t), "state")
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(state)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{e.dir, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, inotifyUser, inotifyUser); err != nil {
			t.Fatal(err)
		}
	}
	wrapper := []string{setpriv, "--reuid", strconv.Itoa(inotifyUser), "--regid", strconv.Itoa(inotifyUser), "--clear-groups"}
	e.startHog(wrapper, inotifyCopy(t, os.Args[0], bin))
	k, err := kubeletsim.Start(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	e.kubelet = k
	e.agent = startAgent(t, agentSpec{
		Node: "fault-inotify-user", FakeNode: "dgx-h100", Rules: "single", KubeletDir: e.dir, StateDir: state,
		Wrapper: wrapper, Binary: inotifyCopy(t, build.agent, bin),
		Extra: []string{"--file-check-interval", interval.String()},
	})
	return e
}

// startHog runs the hog as the agent's user and waits until it holds
// every instance.
func (e *inotifyEnv) startHog(wrapper []string, testBinary string) {
	e.t.Helper()
	e.hog = exec.Command(wrapper[0], append(wrapper[1:], testBinary)...)
	e.hog.Env = append(os.Environ(), inotifyHogEnv+"=1")
	in, err := e.hog.StdinPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := e.hog.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.hog.Start(); err != nil {
		e.t.Fatalf("starting the inotify hog: %v", err)
	}
	e.hogIn = in
	e.t.Cleanup(e.freeInotify)
	line, err := bufio.NewReader(out).ReadString('\n')
	n, convErr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || convErr != nil || n == 0 {
		e.t.Fatalf("the inotify hog took no instance: %q, %v", line, err)
	}
	e.t.Logf("the inotify hog holds %d instances of user %d", n, inotifyUser)
}

// freeInotify ends the hog, which frees its instances.
func (e *inotifyEnv) freeInotify() {
	if e.hog == nil {
		return
	}
	_ = e.hogIn.Close()
	_ = e.hog.Wait()
	e.hog = nil
}

// readyz returns /readyz's status code.
func (e *inotifyEnv) readyz() int {
	code, _, err := e.agent.get("/readyz")
	if err != nil {
		e.t.Fatalf("/readyz: %v", err)
	}
	return code
}

// restartInPlace restarts the simulated kubelet, removing and making
// kubelet.sock again in place, and reports whether the new socket got the
// old one's inode (ext4 gives it at once).
func (e *inotifyEnv) restartInPlace() (sameInode bool) {
	e.t.Helper()
	sock := filepath.Join(e.dir, kubeletsim.SocketName)
	before, err := os.Stat(sock)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.kubelet.Restart(false); err != nil {
		e.t.Fatal(err)
	}
	after, err := os.Stat(sock)
	if err != nil {
		e.t.Fatal(err)
	}
	return before.Sys().(*syscall.Stat_t).Ino == after.Sys().(*syscall.Stat_t).Ino
}

// TestFault16KubeletRestartsWithoutInotify: with every inotify instance of
// the agent's user taken before it starts, the agent serves; each of five
// kubelet restarts that make kubelet.sock again in place (the same inode)
// re-registers through the periodic check, with /readyz 503 in between;
// once instances are free the next periodic check takes one
// (featureplug_plugin_watch_fallback back to 0) and the next restart is
// seen by inotify.
func TestFault16KubeletRestartsWithoutInotify(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	const interval = 500 * time.Millisecond
	e := inotifyStart(t, interval)
	env := &pluginFaultEnv{t: t, dir: e.dir, kubelet: e.kubelet, agent: e.agent}
	env.waitRegistrations(1)
	env.waitReadyz(http.StatusOK)
	if got := e.agent.metric(t, "featureplug_plugin_watch_fallback"); got != 1 {
		t.Fatalf("featureplug_plugin_watch_fallback = %v with no inotify instance, want 1", got)
	}
	for round := range 5 {
		off := pluginFaultLogSize(t, e.agent)
		regs := e.kubelet.Registrations(pluginFaultResource)
		start := time.Now()
		same := e.restartInPlace()
		if code := e.readyz(); code != http.StatusServiceUnavailable && e.kubelet.Registrations(pluginFaultResource) == regs {
			t.Errorf("round %d: /readyz %d after the kubelet restarted and before the agent registered again, want 503", round, code)
		}
		env.waitRegistrations(regs + 1)
		took := time.Since(start)
		env.waitReadyz(http.StatusOK)
		// Without inotify the watcher's checks (its periodic one, or one a
		// change of its watch targets wakes) are what notice the restart.
		pluginFaultWaitLog(t, e.agent, off, "kubelet socket created")
		t.Logf("round %d: kubelet.sock made again with the same inode: %v; registered again %s later (periodic check every %s)",
			round, same, took.Round(time.Millisecond), interval)
	}

	e.freeInotify()
	e.agent.waitMetric(t, "featureplug_plugin_watch_fallback", func(v float64) bool { return v == 0 })
	off := pluginFaultLogSize(t, e.agent)
	regs := e.kubelet.Registrations(pluginFaultResource)
	e.restartInPlace()
	env.waitRegistrations(regs + 1)
	pluginFaultWaitLog(t, e.agent, off, "kubelet socket created; registering every device plugin")
	pluginFaultWaitLog(t, e.agent, 0, "inotify available again; watching the device-plugin directory")
}
