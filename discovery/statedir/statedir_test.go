package statedir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteReplacesWholeAndLeavesNoTemp: the file is created with its
// directory, replaced whole, and no temporary file stays behind.
func TestWriteReplacesWholeAndLeavesNoTemp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "dra-claims.json")
	for _, data := range []string{"first\n", "second, longer\n", "3\n"} {
		if err := WriteFile(path, []byte(data), Private, nil); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != data {
			t.Fatalf("file holds %q, want %q", got, data)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("state directory holds %d entries, want only the file: %v", len(entries), entries)
	}
}

// TestWriteNamesTheFile: a failure names the file (here its directory is
// a regular file).
func TestWriteNamesTheFile(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(filepath.Join(blocker, HealthFile), []byte("{}"), Private, nil)
	if err == nil || !strings.Contains(err.Error(), blocker) {
		t.Fatalf("err = %v, want one naming %s", err, blocker)
	}
}
