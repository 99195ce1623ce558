// Command featureplug-demo shows featureplug's whole chain on a fake node,
// with no GPU and no cluster: discovery, the rules' plan and its
// explanation, the agent publishing labels and serving device plugins to a
// kubelet-side client, a topology-aware allocation, and a GPU failure
// reaching the kubelet. It runs the real featureplug binary as a process,
// ends by itself and removes what it created.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

//go:embed rules.yaml
var demoRules []byte

// waitLimit bounds every wait of the demo.
const waitLimit = 20 * time.Second

func main() {
	binary := flag.String("featureplug", "bin/featureplug", "the featureplug binary to run")
	node := flag.String("fake-node", "dgx-a100", "bundled fake node name or fake-node file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout, *binary, *node)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "featureplug-demo:", err)
		os.Exit(1)
	}
}

// demo holds what one run of the demo created.
type demo struct {
	out     io.Writer
	binary  string
	node    string
	dir     string
	kubelet *kubeletsim.Kubelet
	agent   *exec.Cmd
	exited  chan error
	logs    lockedBuffer
	metrics string
}

func run(ctx context.Context, out io.Writer, binary, node string) (err error) {
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("featureplug binary: %w (run `make build` first)", err)
	}
	dir, err := os.MkdirTemp("", "fpdemo")
	if err != nil {
		return err
	}
	d := &demo{out: out, binary: binary, node: node, dir: dir}
	defer func() {
		if stopErr := d.cleanup(); err == nil {
			err = stopErr
		}
	}()
	start := time.Now()
	steps := []struct {
		title string
		run   func(context.Context) error
	}{
		{"Discovery: the GPUs NVML reports (fake node " + node + ")", d.discover},
		{"Rules: an admin's mapping from device features to resource names", d.showRules},
		{"Plan: what the rules make of this node, and why", d.explain},
		{"Agent: featureplug run, with a kubelet-side client", d.startAgent},
		{"Labels: published as an nfd-worker feature file (GFD-compatible names)", d.showLabels},
		{"Resources: registered with the kubelet, one device plugin each", d.showResources},
		{"Allocation: two whole GPUs, chosen by NVLink topology", d.allocate},
		{"Health: XID 79 on a GPU reaches the kubelet through ListAndWatch", d.health},
	}
	for i, s := range steps {
		fmt.Fprintf(out, "\n\033[1m== %d. %s\033[0m\n\n", i+1, s.title)
		if err := s.run(ctx); err != nil {
			if d.agent != nil {
				fmt.Fprintf(out, "\nagent logs:\n%s\n", d.logs.String())
			}
			return fmt.Errorf("step %d (%s): %w", i+1, s.title, err)
		}
	}
	if err := d.stopAgent(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n\033[1m== Done\033[0m in %.1fs: the agent stopped on SIGTERM and removed its sockets; %s is removed.\n",
		time.Since(start).Seconds(), dir)
	return nil
}

// featureplug runs a featureplug command and prints its output indented.
func (d *demo) featureplug(ctx context.Context, args ...string) error {
	fmt.Fprintf(d.out, "$ featureplug %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, d.binary, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	d.printIndented(buf.String())
	if err != nil {
		return fmt.Errorf("featureplug %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (d *demo) printIndented(s string) {
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Fprintln(d.out, "  "+line)
	}
}

func (d *demo) rulesPath() string { return filepath.Join(d.dir, "rules.yaml") }

func (d *demo) discover(ctx context.Context) error {
	return d.featureplug(ctx, "discover", "--fake-node", d.node)
}

func (d *demo) showRules(ctx context.Context) error {
	if err := os.WriteFile(d.rulesPath(), demoRules, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "%s:\n", d.rulesPath())
	d.printIndented(string(demoRules))
	return d.featureplug(ctx, "rules", "check", d.rulesPath())
}

func (d *demo) explain(ctx context.Context) error {
	return d.featureplug(ctx, "rules", "explain", "--rules", d.rulesPath(), "--fake-node", d.node)
}

func (d *demo) startAgent(ctx context.Context) error {
	k, err := kubeletsim.Start(d.dir)
	if err != nil {
		return err
	}
	d.kubelet = k
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	d.metrics = "http://" + addr
	args := []string{"run", "--fake-node", d.node, "--rules", d.rulesPath(), "--kubelet-dir", d.dir,
		"--publish", "file", "--features-file", filepath.Join(d.dir, "features.d", "featureplug"),
		"--metrics-addr", addr, "--health-recovery", "2s", "--state-dir", filepath.Join(d.dir, "state"),
		"--device-list-strategy", "envvar,cdi-annotations", "--cdi-spec-dir", filepath.Join(d.dir, "cdi")}
	fmt.Fprintf(d.out, "$ featureplug %s\n", strings.Join(args, " "))
	d.agent = exec.Command(d.binary, args...)
	d.agent.Stdout, d.agent.Stderr = &d.logs, &d.logs
	if err := d.agent.Start(); err != nil {
		return err
	}
	launched := time.Now()
	d.exited = make(chan error, 1)
	go func() { d.exited <- d.agent.Wait() }()
	if err := d.waitReady(ctx); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "  pid %d: ready %dms after launch (every resource registered with the kubelet)\n",
		d.agent.Process.Pid, time.Since(launched).Milliseconds())
	return nil
}

func (d *demo) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	for {
		resp, err := http.Get(d.metrics + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				// Ready means every resource is registered; the device
				// lists follow on the kubelet's ListAndWatch streams.
				return d.kubelet.WaitUntil(ctx, func() bool {
					for _, res := range d.kubelet.Resources() {
						if total, _ := d.kubelet.Capacity(res); total == 0 {
							return false
						}
					}
					return true
				})
			}
		}
		select {
		case err := <-d.exited:
			d.exited <- err
			return fmt.Errorf("the agent exited: %v", err)
		case <-ctx.Done():
			return errors.New("the agent did not become ready")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (d *demo) showLabels(context.Context) error {
	path := filepath.Join(d.dir, "features.d", "featureplug")
	deadline := time.Now().Add(waitLimit)
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			fmt.Fprintf(d.out, "%s (nfd-worker turns these into node labels; the details per MIG profile are left out here):\n", path)
			shown, hidden := summarizeLabels(string(data))
			d.printIndented(shown)
			fmt.Fprintf(d.out, "  ... and %d more\n", hidden)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no feature file: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (d *demo) showResources(context.Context) error {
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  RESOURCE\tDEVICES\tHEALTHY\tSOCKET")
	for _, res := range d.kubelet.Resources() {
		total, healthy := d.kubelet.Capacity(res)
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\n", res, total, healthy, d.kubelet.Endpoint(res))
	}
	return tw.Flush()
}

// wholeGPUResource is the demo rules' resource for whole A100s.
const wholeGPUResource = "example.com/a100-sxm4-40gb"

func (d *demo) allocate(ctx context.Context) error {
	var available []string
	for _, dev := range d.kubelet.Devices(wholeGPUResource) {
		available = append(available, dev.ID)
	}
	slices.Sort(available)
	if len(available) < 2 {
		return fmt.Errorf("%s has %d devices, want at least 2", wholeGPUResource, len(available))
	}
	fmt.Fprintf(d.out, "kubelet: GetPreferredAllocation(%s, size 2, available %d devices)\n", wholeGPUResource, len(available))
	preferred, err := d.kubelet.GetPreferredAllocation(ctx, wholeGPUResource, available, nil, 2)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "  preferred: %s\n", strings.Join(preferred, ", "))
	fmt.Fprintf(d.out, "kubelet: Allocate(%s, %s)\n", wholeGPUResource, strings.Join(preferred, ", "))
	resp, err := d.kubelet.Allocate(ctx, wholeGPUResource, preferred)
	if err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(resp.Envs)) {
		fmt.Fprintf(d.out, "  env %s=%s\n", k, resp.Envs[k])
	}
	for _, k := range slices.Sorted(maps.Keys(resp.Annotations)) {
		fmt.Fprintf(d.out, "  annotation %s=%s\n", k, resp.Annotations[k])
	}
	for _, m := range resp.Mounts {
		fmt.Fprintf(d.out, "  mount %s -> %s\n", m.HostPath, m.ContainerPath)
	}
	return nil
}

func (d *demo) health(ctx context.Context) error {
	devices := d.kubelet.Devices(wholeGPUResource)
	if len(devices) == 0 {
		return fmt.Errorf("%s has no devices", wholeGPUResource)
	}
	// The whole-GPU resource holds GPUs 4-7 of the bundled dgx-a100.
	// XID 62: NVIDIA's catalog resets the GPU; with no reset pending in
	// NVML, featureplug holds it for the quiet period.
	fmt.Fprintln(d.out, "injecting XID 62 (internal micro-controller halt) on GPU 4 through the fake node's NVML events")
	resp, err := http.Post(d.metrics+"/fake/xid?gpu=4&xid=62", "", nil)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("injecting the XID: %s", resp.Status)
	}
	injected := time.Now()
	wait := func(want string, pred func([]*pluginapi.Device) bool) error {
		wctx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
		if err := d.kubelet.WaitFor(wctx, wholeGPUResource, pred); err != nil {
			return fmt.Errorf("waiting until %s: %w", want, err)
		}
		_, healthy := d.kubelet.Capacity(wholeGPUResource)
		fmt.Fprintf(d.out, "  after %4dms: %s (%d of %d healthy)\n", time.Since(injected).Milliseconds(), want, healthy, len(devices))
		return nil
	}
	unhealthy := func(devs []*pluginapi.Device) bool {
		for _, dev := range devs {
			if dev.Health == pluginapi.Unhealthy {
				return true
			}
		}
		return false
	}
	if err := wait("the kubelet sees the GPU Unhealthy", unhealthy); err != nil {
		return err
	}
	return wait("the GPU is Healthy again after the 2s quiet period (--health-recovery)",
		func(devs []*pluginapi.Device) bool { return !unhealthy(devs) })
}

func (d *demo) stopAgent() error {
	if d.agent == nil {
		return nil
	}
	if err := d.agent.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-d.exited:
		d.agent = nil
		if err != nil {
			return fmt.Errorf("the agent exited with %v", err)
		}
		return nil
	case <-time.After(waitLimit):
		return errors.New("the agent did not stop on SIGTERM")
	}
}

func (d *demo) cleanup() error {
	var err error
	if d.agent != nil {
		_ = d.agent.Process.Kill()
		<-d.exited //nolint:errcheck // killed: its exit status says nothing
	}
	if d.kubelet != nil {
		d.kubelet.Stop()
	}
	if rmErr := os.RemoveAll(d.dir); rmErr != nil {
		err = rmErr
	}
	return err
}

// summarizeLabels keeps the node-level labels and each resource's count,
// product, replicas and sharing strategy.
func summarizeLabels(file string) (shown string, hidden int) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(file), "\n") {
		key, _, _ := strings.Cut(line, "=")
		keep := strings.HasPrefix(key, "#") || strings.HasPrefix(key, "nvidia.com/gpu.") ||
			strings.HasPrefix(key, "nvidia.com/mig.") || strings.HasPrefix(key, "nvidia.com/mps.") ||
			strings.HasPrefix(key, "nvidia.com/cuda.driver-version.full") || strings.HasPrefix(key, "nvidia.com/cuda.runtime-version.full")
		for _, suffix := range []string{".count", ".product", ".replicas", ".sharing-strategy"} {
			keep = keep || strings.HasSuffix(key, suffix)
		}
		if !keep {
			hidden++
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String(), hidden
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}

// lockedBuffer collects the agent's output; the exec package's copying
// goroutines write it while a failing step reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
