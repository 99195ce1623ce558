package scale

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/test/harness"
)

// scaleSample is one line of a Prometheus text exposition.
type scaleSample struct {
	name   string
	labels map[string]string
	value  float64
}

// scaleParseMetrics parses a Prometheus text exposition (comments and
// malformed lines are skipped).
func scaleParseMetrics(raw string) []scaleSample {
	var out []scaleSample
	sc := bufio.NewScanner(strings.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		j := strings.LastIndexByte(line, ' ')
		if j < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[j+1:], 64)
		if err != nil {
			continue
		}
		head := line[:j]
		s := scaleSample{value: v, labels: map[string]string{}}
		if i := strings.IndexByte(head, '{'); i >= 0 {
			s.name = head[:i]
			scaleParseLabels(strings.TrimSuffix(head[i+1:], "}"), s.labels)
		} else {
			s.name = head
		}
		out = append(out, s)
	}
	return out
}

// scaleParseLabels reads k="v",k="v" pairs (with \" and \\ escapes).
func scaleParseLabels(s string, into map[string]string) {
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return
		}
		key := strings.TrimLeft(s[:eq], ", ")
		var b strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			b.WriteByte(s[i])
		}
		into[key] = b.String()
		if i+1 >= len(s) {
			return
		}
		s = s[i+1:]
	}
}

// scaleAPIMetrics is a snapshot of the kube-apiserver's metrics.
type scaleAPIMetrics struct {
	// requests is apiserver_request_total summed by "VERB resource"
	// (resource/subresource when there is one).
	requests map[string]float64
	// failed is apiserver_request_total of answers other than 2xx, by
	// "VERB resource code".
	failed map[string]float64
	// latencySum and latencyCount are apiserver_request_duration_seconds'
	// sum and count, keyed as requests.
	latencySum, latencyCount map[string]float64
	// rss and cpu are the API server process's resident memory (bytes)
	// and CPU time (seconds).
	rss, cpu float64
	// storageBytes is the size of the etcd database as the API server
	// reports it; objects counts stored objects by resource.
	storageBytes float64
	objects      map[string]float64
}

// scaleReadAPIMetrics reads the API server's /metrics.
func scaleReadAPIMetrics(ctx context.Context, api *harness.APIServer) (scaleAPIMetrics, error) {
	raw, err := api.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return scaleAPIMetrics{}, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	m := scaleAPIMetrics{requests: map[string]float64{}, objects: map[string]float64{},
		latencySum: map[string]float64{}, latencyCount: map[string]float64{}, failed: map[string]float64{}}
	for _, s := range scaleParseMetrics(string(raw)) {
		switch s.name {
		case "apiserver_request_total":
			res := s.labels["resource"]
			if res == "" {
				continue // non-resource URLs: /metrics, /readyz, ...
			}
			if sub := s.labels["subresource"]; sub != "" {
				res += "/" + sub
			}
			m.requests[s.labels["verb"]+" "+res] += s.value
			if code := s.labels["code"]; !strings.HasPrefix(code, "2") {
				m.failed[s.labels["verb"]+" "+res+" "+code] += s.value
			}
		case "apiserver_request_duration_seconds_sum", "apiserver_request_duration_seconds_count":
			res := s.labels["resource"]
			if res == "" {
				continue
			}
			if sub := s.labels["subresource"]; sub != "" {
				res += "/" + sub
			}
			into := m.latencySum
			if strings.HasSuffix(s.name, "_count") {
				into = m.latencyCount
			}
			into[s.labels["verb"]+" "+res] += s.value
		case "process_resident_memory_bytes":
			m.rss = s.value
		case "process_cpu_seconds_total":
			m.cpu = s.value
		case "apiserver_storage_size_bytes", "apiserver_storage_db_total_size_in_bytes":
			m.storageBytes = max(m.storageBytes, s.value)
		case "apiserver_storage_objects", "apiserver_resource_objects":
			m.objects[s.labels["resource"]] = s.value
		}
	}
	return m, nil
}

// scaleMeanLatency returns the mean API server latency of the requests
// key ("VERB resource") made between before and after, "-" for none.
func scaleMeanLatency(before, after scaleAPIMetrics, key string) string {
	n := after.latencyCount[key] - before.latencyCount[key]
	if n <= 0 {
		return "-"
	}
	mean := time.Duration((after.latencySum[key] - before.latencySum[key]) / n * float64(time.Second))
	return mean.Round(100 * time.Microsecond).String()
}

// scaleTotal sums all request counters.
func scaleTotal(req map[string]float64) float64 {
	var n float64
	for _, v := range req {
		n += v
	}
	return n
}

// scaleDelta returns after - before per key, leaving out zeros.
func scaleDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// scaleIsWrite says whether an apiserver_request_total verb writes.
func scaleIsWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE":
		return true
	}
	return false
}

// scaleSortedKeys returns m's keys sorted.
func scaleSortedKeys(m map[string]float64) []string { return slices.Sorted(maps.Keys(m)) }

// scaleProcStat is a process's CPU time (seconds) and resident memory
// (bytes) from /proc.
type scaleProcStat struct{ cpu, rss float64 }

// scaleReadProc reads /proc/<pid>/stat and /proc/<pid>/status.
func scaleReadProc(t *testing.T, pid int) scaleProcStat {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("reading the CPU time of process %d: %v", pid, err)
	}
	// The command name (field 2) may hold spaces; fields after its ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	const ticks = 100 // USER_HZ on Linux
	st := scaleProcStat{cpu: (utime + stime) / ticks}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the memory of process %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			st.rss = kb * 1024
		}
	}
	return st
}

// scaleLoadAvg returns /proc/loadavg's first three fields.
func scaleLoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
