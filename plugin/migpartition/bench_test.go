package migpartition_test

import (
	"testing"

	"github.com/featureplug/featureplug/plugin/migpartition"
	"github.com/featureplug/featureplug/rules/plan"
)

// BenchmarkBuild8xB200 lays out 8 B200s with every profile and the whole
// GPU: what the DRA sink does on every plan of the largest catalog node.
func BenchmarkBuild8xB200(b *testing.B) {
	var gpus []plan.DynamicGPU
	for i := range 8 {
		gpus = append(gpus, dynamicGPU(b, "NVIDIA B200", i, true))
	}
	b.ReportAllocs()
	for b.Loop() {
		l := migpartition.Build(gpus, migpartition.Options{})
		if l.Devices() != 208 {
			b.Fatal(l.Devices())
		}
	}
}
