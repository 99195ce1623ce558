package discovery_test

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// nvmlCallBudget is the most NVML calls discovery may make on an 8-GPU
// node: what NVIDIA's device plugin makes to start on 8x H100.
const nvmlCallBudget = 158

// nvmlCounter counts NVML calls by method name.
type nvmlCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *nvmlCounter) add(name string) {
	c.mu.Lock()
	c.calls[name]++
	c.mu.Unlock()
}

func (c *nvmlCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.calls {
		n += k
	}
	return n
}

func (c *nvmlCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(c.calls)) {
		fmt.Fprintf(&b, "  %s: %d\n", name, c.calls[name])
	}
	return b.String()
}

// countingDevice is a device handle whose every method call is counted
// before it is forwarded to the wrapped handle.
type countingDevice struct {
	*mock.Device
	inner nvml.Device
}

// countNVML wraps lib so that every call of nvml.Interface and nvml.Device
// is counted (a test helper built on go-nvml's mock structs: each func
// field forwards to the method of the same name of the wrapped value).
// Device handles passed in are unwrapped, handles returned are wrapped.
func countNVML(lib nvml.Interface) (nvml.Interface, *nvmlCounter) {
	c := &nvmlCounter{calls: map[string]int{}}
	m := &mock.Interface{}
	c.fill(m, lib, "")
	if p, ok := lib.(discovery.SysfsProvider); ok {
		// The fake node's sysfs is no NVML call: pass it on.
		return countingSysfsLib{m, p}, c
	}
	return m, c
}

// countingSysfsLib is a counted library whose wrapped one brings its own
// sysfs.
type countingSysfsLib struct {
	*mock.Interface
	discovery.SysfsProvider
}

func (c *nvmlCounter) wrapDevice(d nvml.Device) nvml.Device {
	if d == nil {
		return nil
	}
	if _, ok := d.(*countingDevice); ok {
		return d
	}
	w := &countingDevice{Device: &mock.Device{}, inner: d}
	c.fill(w.Device, d, "Device.")
	return w
}

// fill sets every func field of the mock struct m to count the call and
// call target's method of the same name.
func (c *nvmlCounter) fill(m, target any, prefix string) {
	deviceType := reflect.TypeFor[nvml.Device]()
	v := reflect.ValueOf(m).Elem()
	tv := reflect.ValueOf(target)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, ok := strings.CutSuffix(f.Name, "Func")
		if !ok || f.Type.Kind() != reflect.Func {
			continue
		}
		method := tv.MethodByName(name)
		if !method.IsValid() {
			continue
		}
		ft := f.Type
		v.Field(i).Set(reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
			c.add(prefix + name)
			for k, a := range args {
				if a.Kind() == reflect.Interface && !a.IsNil() {
					if cd, ok := a.Interface().(*countingDevice); ok {
						args[k] = reflect.ValueOf(&cd.inner).Elem()
					}
				}
			}
			var out []reflect.Value
			if ft.IsVariadic() {
				out = method.CallSlice(args)
			} else {
				out = method.Call(args)
			}
			for k, o := range out {
				if ft.Out(k) == deviceType && !o.IsNil() {
					wrapped := c.wrapDevice(o.Interface().(nvml.Device))
					out[k] = reflect.ValueOf(&wrapped).Elem()
				}
			}
			return out
		}))
	}
}

// TestDiscoveryNVMLCallBudget counts the NVML calls of one discovery of
// an 8x H100 node (NVSwitch, 18 NVLinks per GPU) and fails above NVIDIA's
// figure. Reading every link's state, remote PCI info and remote type one
// call at a time takes 605 calls on NVIDIA's fake library.
func TestDiscoveryNVMLCallBudget(t *testing.T) {
	for _, tt := range []struct {
		node     string
		budget   int
		geometry bool
	}{
		{"dgx-h100", nvmlCallBudget, false},
		{"hgx-b200", nvmlCallBudget, false},
		// Bridged pairs: every active link's remote end is read once
		// (110 calls for 4 GPUs).
		{"h100-nvl", nvmlCallBudget, false},
		// Dynamic MIG's geometry (ReadMIGGeometry): per GPU a handle, one
		// profile-info call per profile enum and one placements call per
		// profile the GPU has.
		{"dgx-h100", nvmlCallBudget + 8*(1+nvml.GPU_INSTANCE_PROFILE_COUNT+7), true},
	} {
		t.Run(tt.node, func(t *testing.T) {
			node, err := fakenode.Named(tt.node)
			if err != nil {
				t.Fatal(err)
			}
			lib, calls := countNVML(node.NVML())
			inv, err := discovery.Discover(lib)
			if err != nil {
				t.Fatal(err)
			}
			if tt.geometry {
				if err := discovery.ReadMIGGeometry(lib, inv); err != nil {
					t.Fatal(err)
				}
			}
			if inv.GPUs[0].NVLinks == 0 || inv.Links[0][1].NVLinks == 0 {
				t.Fatalf("the counted discovery lost NVLink: %+v", inv.Links[0][1])
			}
			n := calls.total()
			t.Logf("%s: %d NVML calls for %d GPUs\n%s", tt.node, n, len(inv.GPUs), calls)
			if n > tt.budget {
				t.Errorf("discovery of %s made %d NVML calls, budget %d:\n%s", tt.node, n, tt.budget, calls)
			}
			// Each link is read at most once.
			for name, k := range calls.calls {
				if strings.HasPrefix(name, "Device.GetNvLink") && k > len(inv.GPUs)*18 {
					t.Errorf("%s called %d times", name, k)
				}
			}
		})
	}
}

// TestCountNVMLSeesEveryCall guards the counting helper itself: the same
// discovery through it and without it gives the same inventory.
func TestCountNVMLSeesEveryCall(t *testing.T) {
	node, err := fakenode.Named("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	want, err := discovery.Discover(node.NVML())
	if err != nil {
		t.Fatal(err)
	}
	lib, calls := countNVML(node.NVML())
	got, err := discovery.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("inventory through the counter differs:\n%+v\nwant\n%+v", got, want)
	}
	if calls.calls["DeviceGetCount"] != 1 || calls.calls["Device.GetUUID"] < 8 {
		t.Errorf("calls not counted:\n%s", calls)
	}
}
