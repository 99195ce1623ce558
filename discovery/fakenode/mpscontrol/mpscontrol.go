// Package mpscontrol is the fake node's nvidia-cuda-mps-control: a control
// daemon that speaks the commands featureplug's MPS supervisor sends, so
// that MPS-shared resources are served on a fake node through the same
// code path as on a GPU node. It has no CUDA: it starts no MPS server and
// serves no client; it keeps the settings it is given and answers for them.
//
// It is a multi-call program: featureplug's main runs Main when it is
// invoked as nvidia-cuda-mps-control (Invoked), and Install links that name
// in a fake driver root to featureplug's binary. As the real program:
//
//	nvidia-cuda-mps-control -d   starts the daemon in the background and
//	                             returns once it accepts commands
//	nvidia-cuda-mps-control -f   runs the daemon in the foreground
//	nvidia-cuda-mps-control      sends each line of stdin to the daemon
//	                             and prints its answers
//
// The daemon creates the pipe directory ($CUDA_MPS_PIPE_DIRECTORY, default
// /tmp/nvidia-mps) and the log directory ($CUDA_MPS_LOG_DIRECTORY, default
// /var/log/nvidia-mps), listens on <pipe>/control, writes its pid to
// <pipe>/nvidia-cuda-mps-control.pid and logs every command it receives to
// <log>/control.log (with CUDA_VISIBLE_DEVICES at start), so tests can see
// what the supervisor asked. It knows get/set_default_active_thread_percentage,
// get/set_default_device_pinned_mem_limit (a device named by UUID must be in
// CUDA_VISIBLE_DEVICES, an ordinal must be below their count),
// get_server_list, get_device_client_list and quit; any other command is an
// error. A daemon whose socket is removed (its directory deleted) exits, so
// a test's temporary directory never leaves one behind.
package mpscontrol

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Program is the name of the control program.
const Program = "nvidia-cuda-mps-control"

// Environment variables the program reads, as the real one does.
const (
	EnvPipeDirectory  = "CUDA_MPS_PIPE_DIRECTORY"
	EnvLogDirectory   = "CUDA_MPS_LOG_DIRECTORY"
	EnvVisibleDevices = "CUDA_VISIBLE_DEVICES"
)

// Files of the daemon.
const (
	// SocketName is the daemon's socket in the pipe directory.
	SocketName = "control"
	// PIDFile is where the daemon writes its pid, in the pipe directory.
	PIDFile = "nvidia-cuda-mps-control.pid"
	// LogFile is the daemon's log, in the log directory.
	LogFile = "control.log"
)

// Defaults of the real program when the environment sets no directory.
const (
	defaultPipeDir = "/tmp/nvidia-mps"
	defaultLogDir  = "/var/log/nvidia-mps"
)

// Timing of the daemon: how long -d waits for the daemon to accept, how
// often the daemon checks that its socket is still there, how long one
// command may take.
const (
	startTimeout   = 10 * time.Second
	socketCheck    = 500 * time.Millisecond
	commandTimeout = 5 * time.Second
)

// notRunning is what the real client prints when no daemon answers.
const notRunning = "Cannot find MPS control daemon process"

// Invoked reports whether argv0 (os.Args[0]) names the control program.
func Invoked(argv0 string) bool { return filepath.Base(argv0) == Program }

// Install makes <root>/usr/bin/nvidia-cuda-mps-control a symbolic link to
// exe (a binary whose main runs Main when invoked under that name) and
// returns the link's path. A file already there (the empty stub a fake
// driver root holds) is replaced.
func Install(root, exe string) (string, error) {
	dir := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("fake MPS control: %w", err)
	}
	link := filepath.Join(dir, Program)
	if target, err := os.Readlink(link); err == nil && target == exe {
		return link, nil
	}
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(exe, tmp); err != nil {
		return "", fmt.Errorf("fake MPS control: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("fake MPS control: %w", err)
	}
	return link, nil
}

// Main runs the program with its arguments (without the program name) and
// returns its exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := readEnv()
	switch {
	case len(args) == 0:
		return runClient(env, stdin, stdout)
	case len(args) == 1 && args[0] == "-d":
		return startBackground(env, stderr)
	case len(args) == 1 && args[0] == "-f":
		if err := serve(env); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", Program, err)
			return 1
		}
		return 0
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprintf(stdout, "usage: %s [-d | -f]\n  -d  start the control daemon in the background\n  -f  run the control daemon in the foreground\n  (none) send the commands on stdin to the daemon\n"+
			"featureplug's fake MPS control daemon: no CUDA, no MPS server\n", Program)
		return 0
	}
	fmt.Fprintf(stderr, "%s: unknown arguments %q (use -d, -f or none)\n", Program, args)
	return 1
}

// env is what the program reads from its environment.
type env struct {
	pipeDir, logDir string
	visible         []string
}

func readEnv() env {
	e := env{pipeDir: os.Getenv(EnvPipeDirectory), logDir: os.Getenv(EnvLogDirectory)}
	if e.pipeDir == "" {
		e.pipeDir = defaultPipeDir
	}
	if e.logDir == "" {
		e.logDir = defaultLogDir
	}
	for _, d := range strings.Split(os.Getenv(EnvVisibleDevices), ",") {
		if d = strings.TrimSpace(d); d != "" {
			e.visible = append(e.visible, d)
		}
	}
	return e
}

func (e env) socket() string { return filepath.Join(e.pipeDir, SocketName) }

// reply is the daemon's answer to one command.
type reply struct {
	Out   string `json:"out,omitempty"`
	Error string `json:"error,omitempty"`
}

// runClient sends every line of stdin to the daemon, printing the answers.
func runClient(e env, stdin io.Reader, stdout io.Writer) int {
	status := 0
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		r, err := send(e.socket(), line)
		if err != nil {
			fmt.Fprintln(stdout, notRunning)
			return 1
		}
		if r.Out != "" {
			fmt.Fprintln(stdout, r.Out)
		}
		if r.Error != "" {
			fmt.Fprintln(stdout, r.Error)
			status = 1
		}
	}
	return status
}

// send sends one command to the daemon listening on socket.
func send(socket, command string) (reply, error) {
	conn, err := net.DialTimeout("unix", socket, commandTimeout)
	if err != nil {
		return reply{}, err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(commandTimeout))
	if _, err := fmt.Fprintln(conn, command); err != nil {
		return reply{}, err
	}
	var r reply
	if err := json.NewDecoder(conn).Decode(&r); err != nil {
		return reply{}, err
	}
	return r, nil
}

// startBackground starts the daemon as a child in its own session (as the
// real -d forks one) and returns once it accepts commands.
func startBackground(e env, stderr io.Writer) int {
	if _, err := send(e.socket(), "get_server_list"); err == nil {
		fmt.Fprintln(stderr, "An instance of this daemon is already running")
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "%s -d: %v\n", Program, err)
		return 1
	}
	cmd := &exec.Cmd{Path: exe, Args: []string{Program, "-f"}, Env: os.Environ(),
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "%s -d: %v\n", Program, err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(startTimeout)
	for {
		if _, err := send(e.socket(), "get_server_list"); err == nil {
			return 0 // the daemon keeps running after we return
		}
		select {
		case err := <-exited:
			fmt.Fprintf(stderr, "%s -d: the daemon exited (%v): %s\n", Program, err, strings.TrimSpace(out.String()))
			return 1
		case <-deadline:
			_ = cmd.Process.Kill()
			fmt.Fprintf(stderr, "%s -d: the daemon did not accept commands within %s\n", Program, startTimeout)
			return 1
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// syncBuffer collects a child's output while another goroutine may read it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is the state of a running daemon.
type daemon struct {
	env env
	log io.Writer

	mu         sync.Mutex
	percentage float64
	pinned     map[string]string // by device as given
}

// serve runs the daemon until quit, until its socket is removed, or until
// SIGTERM.
func serve(e env) error {
	for _, dir := range []string{e.pipeDir, e.logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if _, err := send(e.socket(), "get_server_list"); err == nil {
		return errors.New("an instance of this daemon is already running")
	}
	_ = os.Remove(e.socket())
	ln, err := net.Listen("unix", e.socket())
	if err != nil {
		return err
	}
	defer func() { _ = ln.Close() }()
	info, err := os.Stat(e.socket())
	if err != nil {
		return err
	}
	pidFile := filepath.Join(e.pipeDir, PIDFile)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(e.logDir, LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }()
	d := &daemon{env: e, log: logFile, percentage: 100, pinned: map[string]string{}}
	d.logf("control daemon started (featureplug fake), pid %d, %s=%s", os.Getpid(), EnvVisibleDevices, strings.Join(e.visible, ","))

	stop := make(chan string, 1)
	quit := func(why string) {
		select {
		case stop <- why:
		default:
		}
	}
	go watchSocket(e.socket(), info, quit)
	go watchSignals(quit)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				quit("listener closed: " + err.Error())
				return
			}
			go d.handle(conn, quit)
		}
	}()
	why := <-stop
	d.logf("control daemon exiting: %s", why)
	_ = ln.Close()
	if cur, err := os.Stat(e.socket()); err == nil && os.SameFile(cur, info) {
		_ = os.Remove(e.socket())
		_ = os.Remove(pidFile)
	}
	return nil
}

// watchSocket calls quit once the daemon's socket is gone or replaced.
func watchSocket(socket string, info os.FileInfo, quit func(string)) {
	for {
		time.Sleep(socketCheck)
		cur, err := os.Stat(socket)
		if err != nil || !os.SameFile(cur, info) {
			quit("socket " + socket + " removed")
			return
		}
	}
}

// watchSignals calls quit on SIGTERM or SIGINT.
func watchSignals(quit func(string)) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	quit("signal " + (<-ch).String())
}

// handle answers the one command of a connection.
func (d *daemon) handle(conn net.Conn, quit func(string)) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(commandTimeout))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && line == "" {
		return
	}
	command := strings.TrimSpace(line)
	d.logf("command: %s", command)
	r, done := d.run(command)
	if r.Error != "" {
		d.logf("error: %s", r.Error)
	}
	_ = json.NewEncoder(conn).Encode(r)
	if done {
		quit("quit")
	}
}

// run executes one command; done is set by quit.
func (d *daemon) run(command string) (r reply, done bool) {
	fields := strings.Fields(command)
	if len(fields) == 0 {
		return reply{Error: "empty command"}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	args := fields[1:]
	switch name := fields[0]; name {
	case "get_default_active_thread_percentage":
		return reply{Out: strconv.FormatFloat(d.percentage, 'f', 1, 64)}, false
	case "set_default_active_thread_percentage":
		if len(args) != 1 {
			return reply{Error: name + ": want one percentage"}, false
		}
		p, err := strconv.ParseFloat(args[0], 64)
		if err != nil || p <= 0 || p > 100 {
			return reply{Error: fmt.Sprintf("%s: %q is not a percentage in (0, 100]", name, args[0])}, false
		}
		d.percentage = p
		return reply{Out: strconv.FormatFloat(p, 'f', 1, 64)}, false
	case "get_default_device_pinned_mem_limit":
		if len(args) != 1 {
			return reply{Error: name + ": want one device"}, false
		}
		if err := d.checkDevice(args[0]); err != nil {
			return reply{Error: name + ": " + err.Error()}, false
		}
		return reply{Out: d.pinned[args[0]]}, false
	case "set_default_device_pinned_mem_limit":
		if len(args) != 2 {
			return reply{Error: name + ": want a device and a limit"}, false
		}
		if err := d.checkDevice(args[0]); err != nil {
			return reply{Error: name + ": " + err.Error()}, false
		}
		if !validLimit(args[1]) {
			return reply{Error: fmt.Sprintf("%s: %q is not a memory limit (e.g. 1024M, 2G)", name, args[1])}, false
		}
		d.pinned[args[0]] = args[1]
		return reply{}, false
	case "get_server_list", "get_device_client_list":
		return reply{}, false // no MPS server: the fake has no CUDA
	case "quit":
		return reply{}, true
	}
	return reply{Error: fmt.Sprintf("unknown command %q", fields[0])}, false
}

// checkDevice accepts a device as the real daemon names them: an ordinal
// among CUDA_VISIBLE_DEVICES, or a UUID in it.
func (d *daemon) checkDevice(dev string) error {
	if n, err := strconv.Atoi(dev); err == nil {
		if n < 0 || n >= len(d.env.visible) {
			return fmt.Errorf("device ordinal %d is not below the %d devices of %s", n, len(d.env.visible), EnvVisibleDevices)
		}
		return nil
	}
	for _, v := range d.env.visible {
		if v == dev {
			return nil
		}
	}
	return fmt.Errorf("device %s is not in %s=%s", dev, EnvVisibleDevices, strings.Join(d.env.visible, ","))
}

// validLimit reports whether s is a memory limit as the daemon takes it: a
// number with an optional K, M or G suffix.
func validLimit(s string) bool {
	num := strings.TrimRight(s, "KMGkmg")
	if len(s)-len(num) > 1 {
		return false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return err == nil && n > 0
}

func (d *daemon) logf(format string, args ...any) {
	fmt.Fprintf(d.log, "[%s] %s\n", time.Now().UTC().Format("2006-01-02 15:04:05.000"), fmt.Sprintf(format, args...))
}
