package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// defaultStopGrace is how long Stop waits after SIGTERM before it sends
// SIGKILL, unless the ProcessSpec says otherwise.
const defaultStopGrace = 10 * time.Second

// logTailLines is how many lines of each process log a failed test prints.
const logTailLines = 60

// ProcessSpec describes a child process for StartProcess.
type ProcessSpec struct {
	// Name names the process in logs and errors (e.g. "nfd-master").
	Name string
	// Path is the executable.
	Path string
	// Args are the arguments, without the program name.
	Args []string
	// Env is added to the test process's environment.
	Env []string
	// Dir is the working directory; empty means a fresh temporary directory.
	Dir string
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL
	// (default 10s).
	StopGrace time.Duration
}

// Process is a child process started by StartProcess. It is stopped when the
// test ends, and its combined output is kept in LogPath.
type Process struct {
	// Name is the name given in the ProcessSpec.
	Name string
	// LogPath is the file holding the process's stdout and stderr.
	LogPath string

	cmd       *exec.Cmd
	stopGrace time.Duration
	done      chan struct{}
	mu        sync.Mutex
	err       error // exit error, valid once done is closed
	stop      sync.Once
}

// StartProcess starts spec as a child process in its own process group, with
// its output in a log file under LogDir(t). The process gets SIGKILL if the
// test process dies first, and is stopped (SIGTERM, then SIGKILL) by t.Cleanup;
// when the test failed, the tail of its log is printed.
func StartProcess(t testing.TB, spec ProcessSpec) *Process {
	t.Helper()
	p, err := startProcess(LogDir(t), spec)
	if err != nil {
		t.Fatalf("starting %s: %v", spec.Name, err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Logf("stopping %s: %v", p.Name, err)
		}
		if t.Failed() {
			t.Logf("--- last %d lines of %s log (%s):\n%s", logTailLines, p.Name, p.LogPath, p.Tail(logTailLines))
		}
	})
	return p
}

func startProcess(logDir string, spec ProcessSpec) (*Process, error) {
	if spec.Name == "" || spec.Path == "" {
		return nil, fmt.Errorf("process spec needs Name and Path (have name %q, path %q)", spec.Name, spec.Path)
	}
	logFile, err := createLog(logDir, spec.Name)
	if err != nil {
		return nil, err
	}
	logPath := logFile.Name()
	dir := spec.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp(logDir, spec.Name+"-wd-"); err != nil {
			logFile.Close()
			return nil, fmt.Errorf("creating working directory: %w", err)
		}
	}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(logFile, "# %s %s\n", spec.Path, strings.Join(spec.Args, " "))
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("running %s: %w", spec.Path, err)
	}
	grace := spec.StopGrace
	if grace <= 0 {
		grace = defaultStopGrace
	}
	p := &Process{Name: spec.Name, LogPath: logPath, cmd: cmd, stopGrace: grace, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitErr returns how the process ended: nil while it runs or after a clean
// exit, the *exec.ExitError otherwise.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process's group.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return fmt.Errorf("%s (pid %d) has already exited: %v", p.Name, p.Pid(), p.ExitErr())
	}
	if err := syscall.Kill(-p.Pid(), sig); err != nil {
		return fmt.Errorf("signalling %s (pid %d) with %v: %w", p.Name, p.Pid(), sig, err)
	}
	return nil
}

// Stop ends the process and its group: SIGTERM, then SIGKILL after a grace
// period. It is safe to call more than once; only the first call acts. A
// process killed by Stop's own signals is not an error.
func (p *Process) Stop() error {
	var err error
	p.stop.Do(func() {
		if !p.Running() {
			err = unexpectedExit(p.ExitErr())
			return
		}
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(p.stopGrace):
		}
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
		err = fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.Name, p.Pid(), p.stopGrace)
	})
	return err
}

// unexpectedExit reports an exit that Stop did not cause; a clean exit is fine.
func unexpectedExit(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("had already exited before the end of the test: %w", err)
	}
	return err
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.LogPath, err)
	}
	return tail(string(b), n)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// LogDir returns the directory for the logs of t's processes: a subdirectory
// named after the test under $FEATUREPLUG_E2E_LOGS when that is set (kept
// after the run), otherwise a temporary directory removed after the test.
func LogDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("FEATUREPLUG_E2E_LOGS")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating log directory (FEATUREPLUG_E2E_LOGS): %v", err)
	}
	return dir
}

// createLog creates dir/name.log, or dir/name-2.log and so on when a test
// starts the same component more than once.
func createLog(dir, name string) (*os.File, error) {
	for i := 1; ; i++ {
		p := filepath.Join(dir, name+".log")
		if i > 1 {
			p = filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, i))
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("creating log file: %w", err)
		}
		return f, nil
	}
}
