package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/featureplug/featureplug/rules/plan"
)

// DefaultControlBinary is the MPS control program, looked up in PATH.
const DefaultControlBinary = "nvidia-cuda-mps-control"

// Environment variables of the control daemon and its clients.
const (
	EnvPipeDirectory  = plan.EnvMPSPipeDirectory
	EnvLogDirectory   = "CUDA_MPS_LOG_DIRECTORY"
	EnvVisibleDevices = "CUDA_VISIBLE_DEVICES"
)

// Control interface commands.
const (
	cmdSetThreadPercentage = "set_default_active_thread_percentage"
	cmdGetThreadPercentage = "get_default_active_thread_percentage"
	cmdSetPinnedMemLimit   = "set_default_device_pinned_mem_limit"
	cmdQuit                = "quit"
)

// waitDelay bounds how long a finished control command may keep its
// output pipes open (a daemonized child that inherited them).
const waitDelay = time.Second

// ErrControlBinaryNotFound is wrapped by the errors of ResolveControlBinary
// (and shown by Ready) when the control program is missing.
var ErrControlBinaryNotFound = errors.New("not found")

// ResolveControlBinary returns the path of the MPS control program: name
// (default DefaultControlBinary) looked up in PATH when it has no '/', or
// name itself when it is an absolute path. The error wraps
// ErrControlBinaryNotFound when the program is missing, and reads, e.g.,
// "nvidia-cuda-mps-control not found in PATH".
func ResolveControlBinary(name string) (string, error) {
	if name == "" {
		name = DefaultControlBinary
	}
	if !strings.Contains(name, "/") {
		path, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s %w in PATH", name, ErrControlBinaryNotFound)
		}
		return path, nil
	}
	if !filepath.IsAbs(name) {
		return "", fmt.Errorf("control binary %q: a path must be absolute", name)
	}
	info, err := os.Stat(name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("%s %w", name, ErrControlBinaryNotFound)
	case err != nil:
		return "", fmt.Errorf("control binary: %w", err)
	case info.IsDir() || info.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("control binary %s is not an executable file (mode %s)", name, info.Mode())
	}
	return name, nil
}

// daemonEnv returns the environment of the daemon and of every control
// command for one resource: the agent's own environment (PATH, library
// paths) with the MPS directories and the visible devices replaced.
func daemonEnv(base []string, pipeDir, logDir string, uuids []string) []string {
	set := map[string]string{
		EnvPipeDirectory:  pipeDir,
		EnvLogDirectory:   logDir,
		EnvVisibleDevices: strings.Join(uuids, ","),
	}
	env := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; !ours {
			env = append(env, kv)
		}
	}
	for _, k := range []string{EnvPipeDirectory, EnvLogDirectory, EnvVisibleDevices} {
		env = append(env, k+"="+set[k])
	}
	return env
}

// controller runs the control program for one resource.
type controller struct {
	binary  string
	env     []string
	timeout time.Duration
}

// startDaemon runs `<binary> -d`, which returns once the daemon is up.
func (c controller) startDaemon(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.binary, "-d")
	out, err := c.run(cmd)
	// The daemon may keep the launcher's output pipes; the launcher's own
	// success is what counts.
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		return fmt.Errorf("%s -d: %w%s", c.binary, err, outputSuffix(out))
	}
	return nil
}

// send runs one control command and returns its output.
func (c controller) send(ctx context.Context, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.binary)
	cmd.Stdin = strings.NewReader(command + "\n")
	out, err := c.run(cmd)
	if err != nil {
		return out, fmt.Errorf("control command %q: %w%s", command, err, outputSuffix(out))
	}
	return out, nil
}

// run runs cmd with the resource's environment and returns its combined
// output, trimmed.
func (c controller) run(cmd *exec.Cmd) (string, error) {
	var out bytes.Buffer
	cmd.Env = c.env
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// outputSuffix formats command output for an error message.
func outputSuffix(out string) string {
	if out == "" {
		return ""
	}
	const limit = 512
	if len(out) > limit {
		out = out[:limit] + "..."
	}
	return ": " + strings.ReplaceAll(out, "\n", "; ")
}
