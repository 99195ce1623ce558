package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadMemory(t *testing.T) {
	got, err := readMemory("testdata/proc", 4242)
	if err != nil {
		t.Fatal(err)
	}
	want := Memory{RSS: 63660, Anon: 9500, File: 54160, FilePMD: 43008}
	if got != want {
		t.Errorf("readMemory = %+v, want %+v", got, want)
	}
}

func TestReadMemoryErrors(t *testing.T) {
	tests := []struct {
		name, status, want string
	}{
		{"no VmRSS", "Name:\tx\nRssAnon:\t1 kB\n", "no VmRSS field"},
		{"not a number", "VmRSS:\tlots kB\n", `field VmRSS:: "lots" is not a number`},
		{"no unit", "VmRSS:\t12\n", `is not "<number> kB"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "7")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "status"), []byte(tt.status), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := readMemory(root, 7)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), filepath.Join(dir, "status")) {
				t.Errorf("readMemory error = %v, want the file and %q", err, tt.want)
			}
		})
	}
	if _, err := readMemory(t.TempDir(), 7); err == nil {
		t.Error("readMemory of a missing process did not fail")
	}
}

func TestReadCPU(t *testing.T) {
	got, err := readCPU("testdata/proc", 4242)
	if err != nil {
		t.Fatal(err)
	}
	// utime 37 + stime 12 ticks of 10 ms; two threads' schedstat.
	want := CPUTime{Ticks: 490 * time.Millisecond, Sched: 500500 * time.Microsecond}
	if got != want {
		t.Errorf("readCPU = %+v, want %+v", got, want)
	}
}

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		name, line string
		want       time.Duration
		err        string
	}{
		{"plain", "1 (a) S 1 1 1 0 -1 0 0 0 0 0 3 4 0 0", 70 * time.Millisecond, ""},
		{"name with parentheses and spaces", "1 (a) b) (c) S 1 1 1 0 -1 0 0 0 0 0 100 0 0 0", time.Second, ""},
		{"no name", "1 a S", 0, "no ')'"},
		{"short", "1 (a) S 1 2", 0, "fields after the command name"},
		{"bad utime", "1 (a) S 1 1 1 0 -1 0 0 0 0 0 x 4 0 0", 0, `field 14: "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatCPU(tt.line)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("parseStatCPU error = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("parseStatCPU = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestParseInitTrace(t *testing.T) {
	data, err := os.ReadFile("testdata/inittrace.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseInitTrace(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("parseInitTrace = %d inits, want 5: %v", len(got), got)
	}
	if got[0] != (PackageInit{"k8s.io/client-go/kubernetes/scheme", 2.1}) || got[1].Package != "google.golang.org/grpc" {
		t.Errorf("parseInitTrace did not sort costliest first: %v", got)
	}
	if _, err := parseInitTrace([]byte("featureplug dev\n")); err == nil {
		t.Error("parseInitTrace of a log without init lines did not fail")
	}
}

func TestSumMetric(t *testing.T) {
	tests := []struct {
		name  string
		match []string
		want  float64
	}{
		{"featureplug_publish_attempts_total", []string{`result="ok"`}, 17},
		{"featureplug_publish_attempts_total", nil, 19},
		{"featureplug_ready", nil, 1},
		{"featureplug_discoveries_total", []string{`result="error"`}, 0},
		{"featureplug_missing", nil, 0},
	}
	for _, tt := range tests {
		f, err := os.Open("testdata/metrics.txt")
		if err != nil {
			t.Fatal(err)
		}
		got, err := sumMetric(f, tt.name, tt.match...)
		_ = f.Close()
		if err != nil || got != tt.want {
			t.Errorf("sumMetric(%s, %v) = %v, %v; want %v", tt.name, tt.match, got, err, tt.want)
		}
	}
	if _, err := sumMetric(strings.NewReader("m{a=\"b\" 1\n"), "m"); err == nil || !strings.Contains(err.Error(), "unterminated") {
		t.Errorf("sumMetric of broken labels: %v", err)
	}
}
