package labeler

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

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
