package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long an agent gets to exit after SIGTERM.
const stopGrace = 5 * time.Second

// logTailBytes is how much of an agent's log an error quotes.
const logTailBytes = 4000

// agentProcess is a launched `featureplug run` (or null plugin).
type agentProcess struct {
	cmd     *exec.Cmd
	logPath string
	baseURL string
	http    *http.Client
	// cgroup is the process's own memory cgroup; nil without one.
	cgroup *memCgroup
	// exited is closed when the process has exited; err is its result.
	exited chan struct{}
	err    error
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}

// launchAgent starts `binary run` with args plus its own --metrics-addr,
// logging to logPath, in a memory cgroup of its own under cgroups (none
// when nil). It returns the process and the instant just before the fork,
// from which start-up is timed.
func launchAgent(binary, logPath string, args []string, cgroups *cgroupParent) (*agentProcess, time.Time, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, time.Time{}, err
	}
	p, start, err := launch(binary, logPath, append([]string{"run", "--metrics-addr", addr}, args...), cgroups)
	if err != nil {
		return nil, time.Time{}, err
	}
	p.baseURL = "http://" + addr
	p.http = &http.Client{Timeout: 10 * time.Second}
	return p, start, nil
}

// launch starts binary with args, logging to logPath, in a memory cgroup
// of its own under cgroups (none when nil), named after logPath's
// directory. It returns the process and the instant just before the fork.
func launch(binary, logPath string, args []string, cgroups *cgroupParent) (*agentProcess, time.Time, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("process log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // the child keeps its own descriptor
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childAttr()
	p := &agentProcess{cmd: cmd, logPath: logPath, http: http.DefaultClient, exited: make(chan struct{})}
	startCmd := cmd.Start
	if cgroups != nil {
		if p.cgroup, err = cgroups.newCgroup("featureplug-bench-" + filepath.Base(filepath.Dir(logPath))); err != nil {
			return nil, time.Time{}, err
		}
		startCmd = func() error { return p.cgroup.start(cmd) }
	}
	start := time.Now()
	if err := startCmd(); err != nil {
		if p.cgroup != nil {
			_ = p.cgroup.remove()
		}
		return nil, time.Time{}, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, start, nil
}

// memory reads the process's resident memory, and its cgroup's.
func (p *agentProcess) memory(procRoot string) (Memory, error) {
	m, err := readMemory(procRoot, p.pid())
	if err != nil || p.cgroup == nil {
		return m, err
	}
	m.Cgroup, err = p.cgroup.read()
	return m, err
}

// pid returns the agent's process ID.
func (p *agentProcess) pid() int { return p.cmd.Process.Pid }

// context returns a context that ends after timeout or when the agent
// exits, whichever comes first.
func (p *agentProcess) context(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("no result within %v", timeout))
	ctx, cancelExit := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-p.exited:
			cancelExit(fmt.Errorf("the agent exited (%v)", p.err))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancelExit(nil); cancel() }
}

// failure wraps err with why ctx ended, if it did, and the tail of the
// agent's log.
func (p *agentProcess) failure(ctx context.Context, what string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return fmt.Errorf("%s: %w\nagent log %s (tail):\n%s", what, err, p.logPath, p.logTail())
}

// logTail returns the end of the agent's log.
func (p *agentProcess) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(data) > logTailBytes {
		data = data[len(data)-logTailBytes:]
	}
	return string(data)
}

// stop sends SIGTERM and waits for the exit, killing the process if it
// takes longer than stopGrace, then removes its cgroup. It reports an
// unclean exit.
func (p *agentProcess) stop() error {
	err := p.terminate()
	if p.cgroup != nil {
		if rmErr := p.cgroup.remove(); rmErr != nil && err == nil {
			err = rmErr
		}
		p.cgroup = nil
	}
	return err
}

func (p *agentProcess) terminate() error {
	select {
	case <-p.exited:
		return p.exitError()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.exitError()
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("process did not exit within %v of SIGTERM; killed", stopGrace)
	}
}

func (p *agentProcess) exitError() error {
	if p.err != nil {
		return fmt.Errorf("agent exit: %w\nagent log %s (tail):\n%s", p.err, p.logPath, p.logTail())
	}
	return nil
}

// signal sends sig to the agent.
func (p *agentProcess) signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling the agent: %w", err)
	}
	return nil
}

// injectXID plays XID xid on GPU gpu of the agent's fake node.
func (p *agentProcess) injectXID(ctx context.Context, gpu, xid int) error {
	url := fmt.Sprintf("%s/fake/xid?gpu=%d&xid=%d", p.baseURL, gpu, xid)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// metric returns the sum of the samples of the metric name whose labels
// contain every one of match (e.g. `result="ok"`), from /metrics.
func (p *agentProcess) metric(ctx context.Context, name string, match ...string) (float64, error) {
	url := p.baseURL + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return sumMetric(resp.Body, name, match...)
}

// sumMetric sums the samples of name in Prometheus text format whose
// label set contains every string of match.
func sumMetric(r io.Reader, name string, match ...string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || strings.HasPrefix(line, "#") || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		labels, value := "", rest
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("metric %s: unterminated labels in %q", name, line)
			}
			labels, value = rest[:end+1], rest[end+1:]
		}
		if !containsAll(labels, match) {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			return 0, fmt.Errorf("metric %s: no value in %q", name, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: value %q in %q: %w", name, fields[0], line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading metrics: %w", err)
	}
	return sum, nil
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
