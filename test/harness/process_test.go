package harness

import (
	"strings"
	"testing"
	"time"
)

func TestProcessStop(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		exits   bool   // the script exits by itself: Stop comes after it did
		wantErr string // "" means Stop succeeds
		wantLog string
	}{
		{name: "stops on SIGTERM", script: "echo started; exec sleep 60", wantLog: "started"},
		{name: "killed when SIGTERM is ignored", script: "trap '' TERM; echo stub''born; while :; do sleep 0.1; done",
			wantErr: "ignored SIGTERM", wantLog: "stubborn"},
		{name: "early exit is reported", script: "echo bye; exit 3", exits: true,
			wantErr: "exit status 3", wantLog: "bye"},
		{name: "clean early exit is fine", script: "echo done", exits: true, wantLog: "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := startProcess(t.TempDir(), ProcessSpec{
				Name: "sh", Path: "/bin/sh", Args: []string{"-c", tt.script}, StopGrace: 500 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			// Stop comes once the script is where the case needs it: exited,
			// or past its echo (the trap is set before it; the log's header
			// holds the script, hence stub''born there).
			deadline := time.After(10 * time.Second)
			for tt.exits && p.Running() || !tt.exits && !strings.Contains(p.Tail(10), tt.wantLog) {
				select {
				case <-p.Done():
				case <-deadline:
					t.Fatalf("the script did not get going: %s", p.Tail(10))
				case <-time.After(5 * time.Millisecond):
				}
			}
			err = p.Stop()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Stop() = %v, want error containing %q", err, tt.wantErr)
			}
			if p.Running() {
				t.Errorf("process still running after Stop")
			}
			if err2 := p.Stop(); err2 != nil {
				t.Errorf("second Stop() = %v, want nil", err2)
			}
			if got := p.Tail(5); !strings.Contains(got, tt.wantLog) || !strings.Contains(got, "# /bin/sh -c") {
				t.Errorf("log tail %q lacks the command line or %q", got, tt.wantLog)
			}
		})
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 5, "a\nb\nc"},
		{"a\nb\nc\n", 2, "... (1 lines before)\nb\nc"},
		{"a\nb\nc", 3, "a\nb\nc"},
		{"", 3, ""},
	}
	for _, tt := range tests {
		if got := tail(tt.in, tt.n); got != tt.want {
			t.Errorf("tail(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestCreateLogKeepsEarlierLogs(t *testing.T) {
	dir := t.TempDir()
	var names []string
	for range 3 {
		f, err := createLog(dir, "etcd")
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, f.Name()[len(dir)+1:])
		f.Close()
	}
	if got, want := strings.Join(names, ","), "etcd.log,etcd-2.log,etcd-3.log"; got != want {
		t.Errorf("log names %s, want %s", got, want)
	}
}
