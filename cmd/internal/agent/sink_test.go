package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/rules/plan"
)

// recordingSink records the plans it checks and applies, and refuses or
// fails when told to.
type recordingSink struct {
	name           string
	refuse, fail   error
	checked, plans []*plan.Plan
	hold           map[string]string // as a Gate, when set
	gateChanged    chan struct{}
}

func (s *recordingSink) Name() string { return s.name }

func (s *recordingSink) Check(_ *discovery.Inventory, p *plan.Plan) error {
	s.checked = append(s.checked, p)
	return s.refuse
}

func (s *recordingSink) Apply(_ context.Context, _ *discovery.Inventory, p *plan.Plan) error {
	if s.fail != nil {
		return s.fail
	}
	s.plans = append(s.plans, p)
	return nil
}

// last is the plan the sink applied last.
func (s *recordingSink) last() *plan.Plan {
	if len(s.plans) == 0 {
		return nil
	}
	return s.plans[len(s.plans)-1]
}

// gatingSink is a recordingSink that is a Gate.
type gatingSink struct{ *recordingSink }

func (g gatingSink) Hold(*plan.Plan) map[string]string { return g.hold }
func (g gatingSink) GateChanged() <-chan struct{}      { return g.gateChanged }

// testAgent is an agent with only the given sinks.
func testAgent(sinks ...Sink) *Agent {
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	for _, s := range sinks {
		a.addSink(s)
	}
	return a
}

// TestPlanRefusedByOneSinkIsAppliedByNone is the two-phase contract: a plan
// one sink refuses in its Check phase reaches no sink's Apply, before or
// after the refusing one, and every sink stays on the previous plan; the
// error names the refusing sink. A plan every sink accepts reaches all.
func TestPlanRefusedByOneSinkIsAppliedByNone(t *testing.T) {
	first, refusing, last := &recordingSink{name: "first"}, &recordingSink{name: "refusing"}, &recordingSink{name: "last"}
	a := testAgent(first, refusing, last)
	old := &plan.Plan{Resources: []plan.Resource{{Name: "example.com/old"}}}
	if err := a.serve(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	refusing.refuse = errors.New("cannot serve example.com/new")
	next := &plan.Plan{Resources: []plan.Resource{{Name: "example.com/new"}}}
	err := a.serve(context.Background(), next)
	if !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "refusing: cannot serve example.com/new") {
		t.Fatalf("serve = %v, want a refusal naming the sink", err)
	}
	for _, s := range []*recordingSink{first, refusing, last} {
		if s.last() != old || len(s.plans) != 1 {
			t.Errorf("sink %s applied %v, want only the previous plan", s.name, s.plans)
		}
		if len(s.checked) != 2 || s.checked[1] != next {
			t.Errorf("sink %s checked %v, want the previous and the new plan", s.name, s.checked)
		}
	}
	if a.served != old {
		t.Errorf("the agent serves %p, want the previous plan %p", a.served, old)
	}

	refusing.refuse = nil
	if err := a.serve(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*recordingSink{first, refusing, last} {
		if s.last() != next {
			t.Errorf("sink %s is on %p once every sink takes the plan, want %p", s.name, s.last(), next)
		}
	}
}

// TestApplyFailureKeepsLaterSinksOnLastGoodPlan: a sink that fails to apply
// a plan every sink checked leaves the sinks after it on the last good
// plan, so that what is published is what is served.
func TestApplyFailureKeepsLaterSinksOnLastGoodPlan(t *testing.T) {
	serving, reporting := &recordingSink{name: "serving"}, &recordingSink{name: "reporting"}
	a := testAgent(serving, reporting)
	old, next := &plan.Plan{}, &plan.Plan{}
	if err := a.serve(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	serving.fail = errors.New("disk full")
	err := a.serve(context.Background(), next)
	if err == nil || errors.Is(err, errRefused) || !strings.Contains(err.Error(), "serving: disk full") {
		t.Errorf("serve = %v, want an apply error naming the sink", err)
	}
	if reporting.last() != old {
		t.Errorf("the sink after a failing one is on %p, want the last good plan %p", reporting.last(), old)
	}
}

// TestGateHoldsBackForEverySink: what a gate holds back is marked in the
// plan every sink checks and applies, and a plan applied again with the
// same marks is the same plan (sinks change nothing).
func TestGateHoldsBackForEverySink(t *testing.T) {
	gate := gatingSink{&recordingSink{name: "gate", hold: map[string]string{"example.com/mps": "daemon starting"}}}
	serving := &recordingSink{name: "serving"}
	a := testAgent(gate, serving)
	if len(a.gates) != 1 {
		t.Fatalf("%d gates, want the gating sink", len(a.gates))
	}
	p := &plan.Plan{Resources: []plan.Resource{{Name: "example.com/gpu"}, {Name: "example.com/mps"}}}
	if err := a.serve(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	got := serving.last()
	if got.Resources[0].Held != "" || got.Resources[1].Held != "daemon starting" || p.Resources[1].Held != "" {
		t.Fatalf("served %+v (rules' plan %+v), want example.com/mps held", got.Resources, p.Resources)
	}
	if err := a.serve(context.Background(), p); err != nil || serving.last() != got {
		t.Errorf("the same plan and marks again gave %p (err %v), want the plan served %p", serving.last(), err, got)
	}
	gate.hold = nil
	if err := a.serve(context.Background(), p); err != nil || serving.last() != p {
		t.Errorf("released: serving %p (err %v), want the rules' plan %p", serving.last(), err, p)
	}
}

// realishSource is a GPUSource without fault hooks, like real NVML.
type realishSource struct{}

func (realishSource) Discover() (*discovery.Inventory, nvml.Interface, error) {
	return &discovery.Inventory{}, nil, nil
}
func (realishSource) Close() {}

var _ faultSource = (*gpusource.Fake)(nil)

func TestFakeEndpointsOnlyForFakeNodes(t *testing.T) {
	fake := openFakeT(t, "dgx-a100")
	for _, tt := range []struct {
		name string
		src  agentconfig.GPUSource
		want int
	}{
		{"real node", realishSource{}, http.StatusNotFound},
		{"fake node", fake, http.StatusNoContent},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &Agent{cfg: agentconfig.Config{Source: tt.src}, registry: prometheus.NewRegistry()}
			srv := httptest.NewServer(a.handler())
			defer srv.Close()
			for _, path := range []string{"/fake/xid?gpu=0&xid=79", "/fake/ecc?gpu=0"} {
				resp, err := http.Post(srv.URL+path, "", nil)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Errorf("POST %s = %d, want %d", path, resp.StatusCode, tt.want)
				}
			}
		})
	}
}
