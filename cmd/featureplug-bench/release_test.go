package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadRelease(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		log     string
		want    *Release
		wantErr bool
	}{
		"released": {
			log: `time=2026-12-01T03:00:45.101Z level=INFO msg="registered with the kubelet" component=plugin
time=2026-12-01T03:00:45.233Z level=INFO msg="released the binary's start-up pages" mappings=3 residentBeforeKiB=23924 residentAfterKiB=1988 took=92.573ms
`,
			want: &Release{BeforeKiB: 23924, AfterKiB: 1988, TookMs: 92.573},
		},
		"none": {log: "time=2026-12-01T03:00:45.101Z level=INFO msg=\"registered with the kubelet\"\n"},
		"bad took": {
			log:     `level=INFO msg="released the binary's start-up pages" mappings=3 residentBeforeKiB=1 residentAfterKiB=1 took=soon` + "\n",
			wantErr: true,
		},
		"field missing": {
			log:     `level=INFO msg="released the binary's start-up pages" mappings=3 residentBeforeKiB=1 took=1ms` + "\n",
			wantErr: true,
		},
	} {
		path := filepath.Join(dir, name+".log")
		if err := os.WriteFile(path, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readRelease(path)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: readRelease error = %v, want error %v", name, err, tc.wantErr)
			continue
		}
		switch {
		case got == nil && tc.want == nil:
		case got == nil || tc.want == nil || *got != *tc.want:
			t.Errorf("%s: readRelease = %+v, want %+v", name, got, tc.want)
		}
	}
}
