package cdi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/rules/plan"
)

// openFakeInventory opens the bundled fake node name (closed when the test
// ends) and discovers its inventory.
func openFakeInventory(t *testing.T, name string) (*gpusource.Fake, *discovery.Inventory) {
	t.Helper()
	src, err := gpusource.OpenFake(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	inv, _, err := src.Discover()
	if err != nil {
		t.Fatal(err)
	}
	return src, inv
}

// cdiTestPlan advertises every whole GPU and MIG device of inv, in one
// resource each, or only the first n devices when n >= 0.
func cdiTestPlan(inv *discovery.Inventory, n int) *plan.Plan {
	r := plan.Resource{Name: "example.com/dev"}
	for _, g := range inv.GPUs {
		if !g.MIGEnabled {
			r.Devices = append(r.Devices, plan.Device{ID: g.UUID, Kind: plan.DeviceGPU, GPUUUID: g.UUID, Index: fmt.Sprint(g.Index)})
		}
		for _, m := range g.MIGDevices {
			r.Devices = append(r.Devices, plan.Device{ID: m.UUID, Kind: plan.DeviceMIG, GPUUUID: g.UUID, Index: fmt.Sprintf("%d:%d", g.Index, m.Index)})
		}
	}
	if n >= 0 {
		r.Devices = r.Devices[:n]
	}
	if len(r.Devices) == 0 {
		return &plan.Plan{}
	}
	return &plan.Plan{Resources: []plan.Resource{r}}
}

// cdiMetricValue reads a counter's or gauge's value.
func cdiMetricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

type failingGenerator struct{}

func (failingGenerator) Edits(*discovery.Inventory, []plan.Device) (Edits, error) {
	return Edits{}, errors.New("no driver")
}

func newTestCDISink(t *testing.T, gen Generator, specDir string) *Sink {
	t.Helper()
	s, err := NewSink(SinkConfig{Options: Options{Kind: "nvidia.com/gpu"}, Writer: Writer{Dir: specDir}, Generator: gen})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeRoot is the Generator of src's fake driver root in dir.
func fakeRoot(src *gpusource.Fake, dir string) Generator {
	return FakeRoot{Dir: dir, Layout: func(dir string) error { return src.Node().WriteDriverRoot(dir) }}
}

func cdiDeviceCount(t *testing.T, dir string) int {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI spec errors: %v", errs)
	}
	return len(cache.ListDevices())
}

func TestCDISinkFollowsPlans(t *testing.T) {
	src, inv := openFakeInventory(t, "h200-mig")
	specDir := t.TempDir()
	stale := filepath.Join(specDir, "featureplug-example.com_old.yaml")
	if err := os.WriteFile(stale, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newTestCDISink(t, fakeRoot(src, t.TempDir()), specDir)
	ctx := context.Background()

	// No plan yet: nothing written, nothing removed.
	if err := s.Apply(ctx, inv, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("before any plan: %v", err)
	}

	all := cdiTestPlan(inv, -1)
	if err := s.Apply(ctx, inv, all); err != nil {
		t.Fatal(err)
	}
	want := inv.MIGDeviceCount()
	if got := cdiDeviceCount(t, specDir); got != want {
		t.Errorf("spec has %d devices, want %d", got, want)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale spec: %v, want it removed", err)
	}
	// The same plan again, and an equal new plan: no write.
	for _, p := range []*plan.Plan{all, cdiTestPlan(inv, -1)} {
		if err := s.Apply(ctx, inv, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := cdiMetricValue(t, s.writes); got != 1 {
		t.Errorf("writes = %v after one change, want 1", got)
	}
	if err := s.Apply(ctx, inv, cdiTestPlan(inv, 2)); err != nil {
		t.Fatal(err)
	}
	if got := cdiDeviceCount(t, specDir); got != 2 {
		t.Errorf("spec has %d devices after a smaller plan, want 2", got)
	}
	if got := cdiMetricValue(t, s.devices); got != 2 {
		t.Errorf("featureplug_cdi_spec_devices = %v, want 2", got)
	}
	// A plan with no devices removes the spec: a CDI spec must hold one.
	if err := s.Apply(ctx, inv, &plan.Plan{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.c.Writer.Path("nvidia.com/gpu")); !os.IsNotExist(err) {
		t.Errorf("spec of an empty plan: %v, want it removed", err)
	}
}

// TestCDISinkRestoresItsSpec: a spec removed with its directory, or edited
// by someone else, is written again as the agent last wrote it; an intact
// spec is left alone, and with no plan yet nothing is written.
func TestCDISinkRestoresItsSpec(t *testing.T) {
	src, inv := openFakeInventory(t, "h200-mig")
	specDir := filepath.Join(t.TempDir(), "cdi")
	s := newTestCDISink(t, fakeRoot(src, t.TempDir()), specDir)
	s.RestoreOutput()
	if _, err := os.Stat(specDir); !os.IsNotExist(err) {
		t.Fatalf("before any plan: %v, want nothing written", err)
	}
	if err := s.Apply(context.Background(), inv, cdiTestPlan(inv, -1)); err != nil {
		t.Fatal(err)
	}
	path := s.c.Writer.Path("nvidia.com/gpu")
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s.RestoreOutput()
	if got := cdiMetricValue(t, s.restores); got != 0 {
		t.Errorf("restores = %v with the spec intact, want 0", got)
	}
	for i, damage := range []func() error{
		func() error { return os.RemoveAll(specDir) },
		func() error {
			return os.WriteFile(path, []byte("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"), 0o644)
		},
	} {
		if err := damage(); err != nil {
			t.Fatal(err)
		}
		s.RestoreOutput()
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, written) {
			t.Errorf("damage %d: spec not restored (err %v)", i, err)
		}
		if got := cdiMetricValue(t, s.restores); got != float64(i+1) {
			t.Errorf("damage %d: restores = %v, want %d", i, got, i+1)
		}
	}
	if got := cdiDeviceCount(t, specDir); got != inv.MIGDeviceCount() {
		t.Errorf("restored spec has %d devices, want %d", got, inv.MIGDeviceCount())
	}
}

func TestCDISinkErrorKeepsSpec(t *testing.T) {
	src, inv := openFakeInventory(t, "workstation")
	specDir := t.TempDir()
	good := newTestCDISink(t, fakeRoot(src, t.TempDir()), specDir)
	if err := good.Apply(context.Background(), inv, cdiTestPlan(inv, -1)); err != nil {
		t.Fatal(err)
	}
	bad := newTestCDISink(t, failingGenerator{}, specDir)
	if err := bad.Apply(context.Background(), inv, cdiTestPlan(inv, -1)); err == nil {
		t.Fatal("a generator error was not returned")
	}
	if got := cdiDeviceCount(t, specDir); got != 1 {
		t.Errorf("spec has %d devices after a failed apply, want the last good 1", got)
	}
}
