package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"k8s.io/klog/v2"
)

// TestRouteKlogJSON: client-go's klog messages come out of the agent's slog
// JSON handler, so --log-format json covers them.
func TestRouteKlogJSON(t *testing.T) {
	var buf bytes.Buffer
	routeKlog(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(klog.ClearLogger)

	klog.InfoS("watch of *v1.Node ended", "node", "gpu-1")
	klog.ErrorS(nil, "failed to list *v1.Node")
	klog.Flush()

	dec := json.NewDecoder(&buf)
	var got []map[string]any
	for dec.More() {
		var rec map[string]any
		if err := dec.Decode(&rec); err != nil {
			t.Fatalf("klog output is not JSON lines: %v (%q)", err, buf.String())
		}
		got = append(got, rec)
	}
	if len(got) != 2 {
		t.Fatalf("%d JSON records, want 2: %q", len(got), buf.String())
	}
	if got[0]["msg"] != "watch of *v1.Node ended" || got[0]["node"] != "gpu-1" || got[0]["component"] != "client-go" || got[0]["level"] != "INFO" {
		t.Errorf("first record %v, want the InfoS message with node=gpu-1, component=client-go at INFO", got[0])
	}
	if got[1]["level"] != "ERROR" {
		t.Errorf("second record %v, want level ERROR", got[1])
	}
}
