package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionLine: version names the commit and dates from the Go build
// info, falling back to the values set at build time (an image built
// without .git), and says so when it does not know.
func TestVersionLine(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "34aab94c0ffee"},
		{Key: "vcs.time", Value: "2026-12-01T21:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	for _, tt := range []struct {
		name          string
		info          *debug.BuildInfo
		commit, built string
		want          []string
	}{
		{"build info", stamped, "", "2026-12-02T08:00:00Z",
			[]string{"commit 34aab94c0ffee (modified)", "committed 2026-12-01T21:00:00Z", "built 2026-12-02T08:00:00Z", "go1.26.8"}},
		{"the build info wins", stamped, "0000000", "", []string{"commit 34aab94c0ffee", "built unknown"}},
		{"set at build time", &debug.BuildInfo{GoVersion: "go1.26.8"}, "abc1234", "2026-12-02T08:00:00Z",
			[]string{"commit abc1234,", "built 2026-12-02T08:00:00Z"}},
		{"nothing known", nil, "", "", []string{"commit unknown", "built unknown"}},
	} {
		got := versionLine(tt.info, tt.commit, tt.built)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tt.name, got, w)
			}
		}
	}
}
