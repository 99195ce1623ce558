package mps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// After quit, the worker waits for the daemon to stop answering (so that a
// successor with the same pipe directory can start) for at most
// quitPolls × quitPollInterval.
const (
	quitPolls        = 40
	quitPollInterval = 50 * time.Millisecond
)

// worker supervises the daemon of one resource on its own goroutine.
type worker struct {
	s       *Supervisor
	daemon  Daemon
	pipeDir string
	logDir  string
	// ctl is used by the worker's goroutine only.
	ctl    controller
	cancel context.CancelFunc
	// done is closed when the goroutine has quit the daemon and returned.
	done chan struct{}
	// after, when not nil, is closed when the previous daemon of the same
	// resource has quit.
	after <-chan struct{}

	// Guarded by s.mu.
	ready  bool
	reason string
}

// run starts the daemon, watches it, and restarts it with backoff until
// ctx is done; then it quits the daemon.
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	if w.after != nil {
		select {
		case <-w.after:
		case <-ctx.Done():
			return
		}
	}
	defer w.shutdown()

	s, res := w.s, w.daemon.Resource
	backoff := s.opts.Backoff
	for {
		err := w.start(ctx)
		if ctx.Err() != nil {
			return
		}
		var reason string
		if err == nil {
			s.log.Info("MPS control daemon ready", "resource", res, "pipeDir", w.pipeDir)
			s.setState(w, true, "")
			healthy, dead := w.watch(ctx)
			if ctx.Err() != nil {
				return
			}
			if healthy {
				backoff = s.opts.Backoff
			}
			s.countRestart(w)
			reason = reasonRestarted + dead.Error()
		} else if errors.Is(err, ErrControlBinaryNotFound) {
			reason = err.Error()
		} else {
			s.countStartFailure(w)
			reason = reasonFailed + err.Error()
		}
		delay := backoff.Step()
		switch {
		case err == nil:
			s.log.Warn("MPS control daemon died; restarting", "resource", res, "reason", reason, "retryIn", delay)
		case errors.Is(err, ErrControlBinaryNotFound):
			// Logged once by noteBinary; this is the per-attempt trace.
			s.log.Debug("MPS control binary still missing", "resource", res, "retryIn", delay)
		default:
			s.log.Warn("MPS control daemon did not start", "resource", res, "reason", reason, "retryIn", delay)
		}
		s.setState(w, false, reason)
		if !sleep(ctx, delay) {
			return
		}
	}
}

// start starts and configures the daemon and checks that it answers.
func (w *worker) start(ctx context.Context) error {
	bin, err := ResolveControlBinary(w.s.opts.ControlBinary)
	w.s.noteBinary(err)
	if err != nil {
		return err
	}
	w.ctl.binary = bin
	if err := checkSocketPath(w.pipeDir); err != nil {
		return err
	}
	for _, dir := range []string{w.pipeDir, w.logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating MPS directory: %w", err)
		}
	}
	if err := w.s.ensureShm(); err != nil {
		return err
	}
	// A daemon that answers on our pipe directory is a leftover (of an
	// earlier agent, or one that stopped answering only for a while): its
	// devices and limits are unknown, so it is replaced.
	if _, err := w.ctl.send(ctx, cmdGetThreadPercentage); err == nil {
		w.s.log.Warn("replacing a running MPS control daemon", "resource", w.daemon.Resource, "pipeDir", w.pipeDir)
		w.quit(ctx)
	}
	if err := w.ctl.startDaemon(ctx); err != nil {
		return err
	}
	if err := w.configure(ctx); err != nil {
		w.quit(ctx)
		return fmt.Errorf("configuring: %w", err)
	}
	if _, err := w.ctl.send(ctx, cmdGetThreadPercentage); err != nil {
		w.quit(ctx)
		return fmt.Errorf("not answering after start: %w", err)
	}
	return nil
}

// configure sets the default active thread percentage and the per-GPU
// default pinned memory limits. GPUs are named by UUID: the daemon's
// device ordinals count only the devices in CUDA_VISIBLE_DEVICES.
func (w *worker) configure(ctx context.Context) error {
	for _, command := range configCommands(w.daemon) {
		if _, err := w.ctl.send(ctx, command); err != nil {
			return err
		}
	}
	return nil
}

// configCommands returns the control commands that configure d.
func configCommands(d Daemon) []string {
	var cmds []string
	if d.ActiveThreadPercentage > 0 {
		cmds = append(cmds, fmt.Sprintf("%s %d", cmdSetThreadPercentage, d.ActiveThreadPercentage))
	}
	for _, dev := range d.Devices {
		if dev.PinnedMemoryLimitMiB > 0 {
			cmds = append(cmds, fmt.Sprintf("%s %s %dM", cmdSetPinnedMemLimit, dev.UUID, dev.PinnedMemoryLimitMiB))
		}
	}
	return cmds
}

// watch asks the daemon a cheap question every check interval until it
// does not answer (returned as dead) or ctx is done. healthy reports
// whether at least one check passed.
func (w *worker) watch(ctx context.Context) (healthy bool, dead error) {
	t := time.NewTicker(w.s.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return healthy, nil
		case <-t.C:
		}
		if _, err := w.ctl.send(ctx, cmdGetThreadPercentage); err != nil {
			return healthy, err
		}
		healthy = true
	}
}

// shutdown quits the daemon when the resource goes away or the supervisor
// stops. It runs after ctx is done, so it has its own time limits.
func (w *worker) shutdown() {
	if w.ctl.binary == "" {
		return // never found the binary: never started
	}
	w.quit(context.Background())
	w.s.log.Info("MPS control daemon stopped", "resource", w.daemon.Resource)
}

// quit sends quit and waits, briefly, until the daemon stops answering.
func (w *worker) quit(ctx context.Context) {
	if _, err := w.ctl.send(ctx, cmdQuit); err != nil {
		w.s.log.Debug("MPS quit", "resource", w.daemon.Resource, "error", err.Error())
		return
	}
	for range quitPolls {
		if _, err := w.ctl.send(ctx, cmdGetThreadPercentage); err != nil {
			return
		}
		if !sleep(ctx, quitPollInterval) {
			return
		}
	}
	w.s.log.Warn("MPS control daemon still answers after quit", "resource", w.daemon.Resource)
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
