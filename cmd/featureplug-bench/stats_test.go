package main

import (
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	oneToHundred := make([]float64, 100)
	for i := range oneToHundred {
		oneToHundred[i] = float64(100 - i) // reversed: percentile must sort
	}
	tests := []struct {
		name    string
		samples []float64
		p       float64
		want    float64
	}{
		{"empty", nil, 50, 0},
		{"single", []float64{7}, 99, 7},
		{"p50 of 1..100", oneToHundred, 50, 50},
		{"p99 of 1..100", oneToHundred, 99, 99},
		{"p100 is the max", oneToHundred, 100, 100},
		{"p0 is the min", oneToHundred, 0, 1},
		{"p99 of 10 is the max", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
		{"p90 of 10 is the 9th", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 90, 9},
		{"median of an even count is the lower middle", []float64{4, 1, 3, 2}, 50, 2},
		{"median of an odd count is the middle", []float64{5, 1, 3}, 50, 3},
		{"one outlier does not move p50", []float64{1, 1, 1, 1, 1000}, 50, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.samples)
			if got := percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.samples, tt.p, got, tt.want)
			}
			if !slices.Equal(before, tt.samples) {
				t.Errorf("percentile reordered its input: %v, was %v", tt.samples, before)
			}
		})
	}
}

func TestMedianDurations(t *testing.T) {
	got := median([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond})
	if got != 2*time.Millisecond {
		t.Errorf("median = %v, want 2ms", got)
	}
}

func TestSummarize(t *testing.T) {
	var samples []time.Duration
	for i := 1; i <= 200; i++ {
		samples = append(samples, time.Duration(i)*time.Microsecond)
	}
	got := summarize(samples)
	want := Latency{Calls: 200, P50: 0.1, P99: 0.198, Max: 0.2}
	if got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
}
