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
	dto "github.com/prometheus/client_model/go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// recordingSink records the plans it is given and fails when told to.
type recordingSink struct {
	name  string
	fail  error
	plans []*plan.Plan
}

func (s *recordingSink) Name() string { return s.name }

func (s *recordingSink) Apply(_ context.Context, _ *discovery.Inventory, p *plan.Plan) error {
	s.plans = append(s.plans, p)
	return s.fail
}

func TestApplySinksKeepsLaterSinksOnLastGoodPlan(t *testing.T) {
	old, next := &plan.Plan{}, &plan.Plan{}
	serving := &recordingSink{name: "serving", fail: errors.New("refused")}
	reporting := &recordingSink{name: "reporting"}
	a := &Agent{sinks: []Sink{serving, reporting}, plan: old}

	err := a.applySinks(context.Background(), next)
	if err == nil || !strings.Contains(err.Error(), "serving: refused") {
		t.Errorf("applySinks error = %v, want one naming the sink", err)
	}
	if len(serving.plans) != 1 || serving.plans[0] != next {
		t.Errorf("the failing sink got %v, want the new plan", serving.plans)
	}
	if len(reporting.plans) != 1 || reporting.plans[0] != old {
		t.Errorf("the sink after a failing one got %v, want the last good plan", reporting.plans)
	}

	serving.fail = nil
	if err := a.applySinks(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	if reporting.plans[1] != next {
		t.Errorf("with every sink taking it, the reporting sink got %p, want the new plan %p", reporting.plans[1], next)
	}
}

// realishSource is a GPUSource without event injection, like real NVML.
type realishSource struct{}

func (realishSource) Discover() (*discovery.Inventory, nvml.Interface, error) {
	return &discovery.Inventory{}, nil, nil
}
func (realishSource) Close() {}

func TestFakeEndpointsOnlyForEventInjectors(t *testing.T) {
	fake, err := OpenFake("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	for _, tt := range []struct {
		name string
		src  GPUSource
		want int
	}{
		{"real node", realishSource{}, http.StatusNotFound},
		{"fake node", fake, http.StatusNoContent},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &Agent{cfg: Config{Source: tt.src}, registry: prometheus.NewRegistry()}
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

func TestDroppedLabelsLoggedOncePerKey(t *testing.T) {
	var logs strings.Builder
	var forwarded int
	d := &droppedLabels{
		log:     slog.New(slog.NewTextHandler(&logs, nil)),
		counter: prometheus.NewCounter(prometheus.CounterOpts{Name: "featureplug_label_dropped_total"}),
		next:    func(string, string) { forwarded++ },
		seen:    map[string]bool{},
	}
	long := "example.com/" + strings.Repeat("x", 70) + ".count"
	for range 3 {
		d.dropped(long, "name part must be no more than 63 characters")
	}
	d.dropped("example.com/y", "bad")
	var m dto.Metric
	if err := d.counter.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 2 {
		t.Errorf("featureplug_label_dropped_total = %v, want 2 (distinct keys)", got)
	}
	if n := strings.Count(logs.String(), "label left out"); n != 2 {
		t.Errorf("%d warnings, want one per key:\n%s", n, logs.String())
	}
	if forwarded != 4 {
		t.Errorf("the configured OnDropped saw %d drops, want 4", forwarded)
	}
}
