package main

import (
	"testing"
)

// TestFloorFigures: with the null plugin measured in each round, the
// start-up goal is featureplug's time over the floor's of the same round
// (median of the ratios), at most goalRegisterFloorRatio; the binary goal
// is the agent's size. Without a floor there are no floor figures.
func TestFloorFigures(t *testing.T) {
	plan := testPlan()[:1]
	rounds := []Round{testRound(1, 0), testRound(1, 0), testRound(1, 0)}
	// featureplug registers in 15 ms each round; the floor is 10, 5 and
	// 7.5 ms: ratios 1.5, 3 and 2, median 2 (at the goal, met).
	for i, floor := range []float64{10, 5, 7.5} {
		rounds[i].Floor = &Floor{RegisteredMs: floor, Restarts: []Restart{{RegisteredMs: 1}}}
		rounds[i].BinaryMB, rounds[i].FloorBinaryMB = 36.4, 15.5
	}
	figs := figures(plan, rounds)
	ratio := figureByName(t, figs, "featureplug: launch -> all registered / floor")
	if !near(ratio.Median, 2) || ratio.Result != Pass || ratio.Goal != "<= 2.00 x" {
		t.Errorf("ratio figure = %+v, want median 2, goal <= 2.00 x, PASS", ratio)
	}
	if f := figureByName(t, figs, "null plugin: launch -> registered"); !near(f.Median, 7.5) {
		t.Errorf("floor figure = %+v, want median 7.5", f)
	}
	if f := figureByName(t, figs, "binary"); f.Result != Pass || f.Goal != "<= 40.0 MB" {
		t.Errorf("binary figure = %+v, want PASS against <= 40.0 MB", f)
	}
	rounds[1].Floor.RegisteredMs = 3 // ratios 1.5, 5 and 3 with the next line: median 3
	rounds[2].Floor.RegisteredMs = 5
	if f := figureByName(t, figures(plan, rounds), "featureplug: launch -> all registered / floor"); f.Result != Miss {
		t.Errorf("ratio figure = %+v, want MISS at a median of 3", f)
	}
	for _, f := range figures(plan, []Round{testRound(1, 0)}) {
		if f.Name == "featureplug: launch -> all registered / floor" {
			t.Errorf("a floor figure without a floor: %+v", f)
		}
	}
}
