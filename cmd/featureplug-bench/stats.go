package main

import (
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p <= 100) of samples by the
// nearest-rank method: the smallest sample such that at least p percent of
// the samples are less than or equal to it. It never interpolates, so the
// figure is always a latency that was really observed. samples need not be
// sorted and are not modified; an empty slice gives 0.
func percentile[T ~int64 | ~float64](samples []T, p float64) T {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// median is the 50th percentile by nearest rank (the lower middle sample
// of an even count).
func median[T ~int64 | ~float64](samples []T) T { return percentile(samples, 50) }

// Latency summarizes the latencies of one kind of call, in milliseconds.
type Latency struct {
	// Calls is the number of calls measured.
	Calls int `json:"calls"`
	// P50, P99 and Max are in milliseconds.
	P50 float64 `json:"p50Ms"`
	P99 float64 `json:"p99Ms"`
	Max float64 `json:"maxMs"`
}

// summarize returns the Latency of samples.
func summarize(samples []time.Duration) Latency {
	return Latency{
		Calls: len(samples),
		P50:   ms(percentile(samples, 50)),
		P99:   ms(percentile(samples, 99)),
		Max:   ms(percentile(samples, 100)),
	}
}

// ms converts d to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
