package deviceplugin

import (
	"context"
	"fmt"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"github.com/featureplug/featureplug/rules/plan"
)

// replicaPlan shares 8 GPUs 8 ways: 64 replicas.
func replicaResource() plan.Resource {
	return plan.Resource{
		Name:    "example.com/shared",
		Devices: gpus(0, 1, 2, 3, 4, 5, 6, 7),
		Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 8},
	}
}

// BenchmarkGetPreferredAllocation picks on the real DGX H100 topology
// (bundled dgx-h100: NV18 all-to-all, NUMA preference).
func BenchmarkGetPreferredAllocation(b *testing.B) {
	links := bundledLinks(b, "dgx-h100")
	gpuSet := newDeviceSet(h100Plan("nvidia.com/gpu").Resources[0], links)
	repSet := newDeviceSet(replicaResource(), links)
	all := gpuIDs(0, 1, 2, 3, 4, 5, 6, 7)
	reps := allReplicas(8, 8)
	cases := []struct {
		name            string
		set             *deviceSet
		available, must []string
		size            int
	}{
		{"gpus8/size2", gpuSet, all, nil, 2},
		{"gpus8/size4", gpuSet, all, nil, 4},
		{"gpus8/size4-must", gpuSet, all, gpuIDs(5), 4},
		{"gpus8/size6-of-7", gpuSet, all[1:], nil, 6},
		{"replicas64/size1", repSet, reps, nil, 1},
		{"replicas64/size4", repSet, reps, nil, 4},
		{"replicas64/size16", repSet, reps, nil, 16},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.set.preferred(c.available, c.must, c.size, ReplicasDistributed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("grpc/gpus8/size4", func(b *testing.B) {
		e := startEnv(b, DefaultOptions(), dgxH100Plan(b, "nvidia.com/gpu"))
		e.waitRegistered(1, "nvidia.com/gpu")
		client, err := e.kubelet.Client("nvidia.com/gpu")
		if err != nil {
			b.Fatal(err)
		}
		req := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: all, AllocationSize: 4},
		}}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := client.GetPreferredAllocation(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAllocate(b *testing.B) {
	o, err := Options{DeviceListStrategies: []DeviceListStrategy{DeviceListEnvVar, DeviceListCDICRI}}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	gpuSet := newDeviceSet(h100Plan("nvidia.com/gpu").Resources[0], nvlinkGroups(8, 4))
	mpsRes := replicaResource()
	mpsRes.Sharing.Strategy = plan.SharingMPS
	mpsSet := newDeviceSet(mpsRes, nvlinkGroups(8, 4))
	b.Run("gpus4", func(b *testing.B) {
		ids := gpuIDs(0, 1, 2, 3)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := gpuSet.containerResponse(ids, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mps-replica", func(b *testing.B) {
		ids := []string{replicaID(3, 5)}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := mpsSet.containerResponse(ids, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("grpc/gpus4", func(b *testing.B) {
		e := startEnv(b, o, h100Plan("nvidia.com/gpu"))
		e.waitRegistered(1, "nvidia.com/gpu")
		ctx := context.Background()
		ids := gpuIDs(0, 1, 2, 3)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.kubelet.Allocate(ctx, "nvidia.com/gpu", ids); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchPlan has n resources of one GPU each.
func benchPlan(n int) *plan.Plan {
	p := &plan.Plan{Links: nvlinkGroups(8, 4)}
	for i := range n {
		p.Resources = append(p.Resources, plan.Resource{Name: fmt.Sprintf("example.com/r%d", i), Devices: gpus(i % 8)})
	}
	return p
}

func resourceNames(p *plan.Plan) []string {
	var out []string
	for _, r := range p.Resources {
		out = append(out, r.Name)
	}
	return out
}

// BenchmarkRegistration measures the time from Run until the kubelet has
// every resource registered with its device list.
func BenchmarkRegistration(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("resources%d", n), func(b *testing.B) {
			plan := benchPlan(n)
			names := resourceNames(plan)
			dir := kubeletsim.ShortTempDir(b)
			k, err := kubeletsim.Start(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer k.Stop()
			for i := 0; b.Loop(); i++ {
				e := &env{t: b, dir: dir, kubelet: k}
				e.startManager(DefaultOptions(), plan)
				for _, name := range names {
					e.waitRegistered(i+1, name)
				}
				b.StopTimer()
				e.stop()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkReregistration measures a kubelet restart (registration socket
// and plugin sockets removed, socket re-created) until every resource is
// registered again with its device list.
func BenchmarkReregistration(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("resources%d", n), func(b *testing.B) {
			plan := benchPlan(n)
			names := resourceNames(plan)
			e := startEnv(b, DefaultOptions(), plan)
			for _, name := range names {
				e.waitRegistered(1, name)
			}
			for b.Loop() {
				before := make(map[string]int, n)
				for _, name := range names {
					before[name] = e.kubelet.Registrations(name)
				}
				if err := e.kubelet.Restart(true); err != nil {
					b.Fatal(err)
				}
				for _, name := range names {
					e.waitRegistered(before[name]+1, name)
				}
			}
		})
	}
}
