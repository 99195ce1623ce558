// Command kubeletpeer is the kubelet's side of the device-plugin API for
// test/realgpu/run.sh: it serves kubelet.sock in a directory (plugin/
// kubeletsim), lets featureplug register for a while, then asks every
// registered resource for a preferred allocation and an allocation, and
// writes what it saw as JSON.
//
//	kubeletpeer -dir /tmp/kubelet -wait 8s -out kubelet.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// report is what kubeletpeer writes.
type report struct {
	// Resources are the registered resources, sorted by name.
	Resources []resource `json:"resources"`
	// Waited is how long featureplug had to register.
	Waited string `json:"waited"`
}

// resource is one registered resource as the kubelet sees it.
type resource struct {
	Name          string            `json:"name"`
	Registrations int               `json:"registrations"`
	Devices       []device          `json:"devices"`
	Healthy       int               `json:"healthy"`
	Preferred     []string          `json:"preferred,omitempty"`
	PreferredErr  string            `json:"preferredError,omitempty"`
	AllocateIDs   []string          `json:"allocateIDs,omitempty"`
	AllocateEnvs  map[string]string `json:"allocateEnvs,omitempty"`
	AllocateError string            `json:"allocateError,omitempty"`
}

// device is one advertised device.
type device struct {
	ID     string  `json:"id"`
	Health string  `json:"health"`
	NUMA   []int64 `json:"numa,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kubeletpeer:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "device-plugin directory to serve kubelet.sock in (required)")
	wait := flag.Duration("wait", 8*time.Second, "how long to let plugins register before asking them")
	out := flag.String("out", "", "file to write the JSON report to (default: stdout)")
	flag.Parse()
	if *dir == "" {
		return errors.New("-dir is required")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	k, err := kubeletsim.Start(*dir)
	if err != nil {
		return fmt.Errorf("serving kubelet.sock in %s: %w", *dir, err)
	}
	defer k.Stop()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-time.After(*wait):
	case <-ctx.Done():
	}

	rep := report{Waited: wait.String()}
	names := k.Resources()
	slices.Sort(names)
	for _, name := range names {
		rep.Resources = append(rep.Resources, ask(k, name))
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if *out == "" {
		_, err = os.Stdout.Write(data)
		return err
	}
	return os.WriteFile(*out, data, 0o644)
}

// ask reads one resource's devices and asks its plugin for a preferred
// allocation of two devices and an allocation of the first healthy one.
func ask(k *kubeletsim.Kubelet, name string) resource {
	r := resource{Name: name, Registrations: k.Registrations(name)}
	var healthy []string
	for _, d := range k.Devices(name) {
		dev := device{ID: d.ID, Health: d.Health}
		if d.Topology != nil {
			for _, n := range d.Topology.Nodes {
				dev.NUMA = append(dev.NUMA, n.ID)
			}
		}
		r.Devices = append(r.Devices, dev)
		if d.Health == pluginapi.Healthy {
			healthy = append(healthy, d.ID)
		}
	}
	r.Healthy = len(healthy)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(healthy) >= 2 {
		p, err := k.GetPreferredAllocation(ctx, name, healthy, nil, 2)
		r.Preferred = p
		err2str(&r.PreferredErr, err)
	}
	if len(healthy) >= 1 {
		r.AllocateIDs = healthy[:1]
		resp, err := k.Allocate(ctx, name, healthy[:1])
		err2str(&r.AllocateError, err)
		if resp != nil {
			r.AllocateEnvs = resp.Envs
		}
	}
	return r
}

func err2str(dst *string, err error) {
	if err != nil {
		*dst = err.Error()
	}
}
