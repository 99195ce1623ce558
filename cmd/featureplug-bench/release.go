package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// releaseMsg is the agent's log message once it has released its
// binary's start-up pages (cmd/internal/agent/memory.go).
const releaseMsg = `msg="released the binary's start-up pages"`

// Release is what the agent logged of releasing its binary's start-up
// pages: the resident KiB of its read-only mappings before and right
// after, and how long it took.
type Release struct {
	BeforeKiB int64   `json:"residentBeforeKiB"`
	AfterKiB  int64   `json:"residentAfterKiB"`
	TookMs    float64 `json:"tookMs"`
}

// readRelease finds the release in the agent's text log at path; nil when
// the log has none.
func readRelease(path string) (*Release, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("agent log: %w", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, releaseMsg) {
			r, err := parseRelease(line)
			if err != nil {
				return nil, fmt.Errorf("agent log %s: %w", path, err)
			}
			return r, nil
		}
	}
	return nil, sc.Err()
}

// parseRelease reads residentBeforeKiB, residentAfterKiB and took from one
// log line (slog's text format: key=value).
func parseRelease(line string) (*Release, error) {
	var r Release
	seen := 0
	for _, field := range strings.Fields(line) {
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			continue
		}
		var err error
		switch key {
		case "residentBeforeKiB":
			r.BeforeKiB, err = strconv.ParseInt(val, 10, 64)
		case "residentAfterKiB":
			r.AfterKiB, err = strconv.ParseInt(val, 10, 64)
		case "took":
			var d time.Duration
			d, err = time.ParseDuration(val)
			r.TookMs = ms(d)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("release line %q: %s: %w", line, key, err)
		}
		seen++
	}
	if seen != 3 {
		return nil, fmt.Errorf("release line %q: want residentBeforeKiB, residentAfterKiB and took", line)
	}
	return &r, nil
}
