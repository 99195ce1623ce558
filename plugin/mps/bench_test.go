package mps

import (
	"context"
	"fmt"
	"testing"
)

// benchSupervisor returns a supervisor with n resources whose control
// binary is missing, so no process runs while the benchmark measures.
func benchSupervisor(b *testing.B, n int) (*Supervisor, []Daemon) {
	b.Helper()
	sup, err := New(Options{Root: b.TempDir(), ControlBinary: "/nonexistent/nvidia-cuda-mps-control"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sup.Stop)
	daemons := make([]Daemon, n)
	for i := range daemons {
		daemons[i] = gpus(fmt.Sprintf("example.com/mps-%d", i), 25, 10240, 10240, 10240, 10240, 10240, 10240, 10240, 10240)
	}
	if err := sup.Apply(context.Background(), daemons); err != nil {
		b.Fatal(err)
	}
	return sup, daemons
}

// BenchmarkReady measures the readiness gate the plugin asks on every
// Allocate.
func BenchmarkReady(b *testing.B) {
	sup, daemons := benchSupervisor(b, 8)
	res := daemons[3].Resource
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sup.Ready(res)
		}
	})
}

// BenchmarkApplyUnchanged measures re-applying an unchanged set of 8
// resources of 8 GPUs each, as every rules reload or re-discovery does.
func BenchmarkApplyUnchanged(b *testing.B) {
	sup, daemons := benchSupervisor(b, 8)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := sup.Apply(ctx, daemons); err != nil {
			b.Fatal(err)
		}
	}
}
