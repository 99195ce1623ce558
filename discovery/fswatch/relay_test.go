package fswatch

import (
	"errors"
	"testing"

	"github.com/fsnotify/fsnotify"
)

// TestRelayErrorsNeverBlocksTheSender: errors nobody reads yet do not hold up
// fsnotify's sender, the first relayBuffer reach the reader in order (the
// last one sent may follow them, when the relay still held it as the
// reader began), and closing the watcher's channel closes the relay.
func TestRelayErrorsNeverBlocksTheSender(t *testing.T) {
	src := make(chan error) // unbuffered, as fsnotify's
	relay := relayErrors(&fsnotify.Watcher{Errors: src})
	sent := make([]error, 3*relayBuffer)
	for i := range sent {
		sent[i] = errors.New("watch error")
		src <- sent[i] // blocks forever if the relay waits on its reader
	}
	close(src)
	var got []error
	for err := range relay {
		got = append(got, err)
	}
	if len(got) == relayBuffer+1 && got[relayBuffer] == sent[len(sent)-1] {
		got = got[:relayBuffer]
	}
	if len(got) != relayBuffer {
		t.Fatalf("relayed %d errors, want the first %d", len(got), relayBuffer)
	}
	for i, err := range got {
		if err != sent[i] {
			t.Fatalf("error %d is not the %dth sent", i, i)
		}
	}
}

// TestRelayErrorsDeliversToAWaitingReader: with the reader waiting, every error
// is relayed.
func TestRelayErrorsDeliversToAWaitingReader(t *testing.T) {
	src := make(chan error)
	relay := relayErrors(&fsnotify.Watcher{Errors: src})
	for range 3 * relayBuffer {
		want := errors.New("watch error")
		src <- want
		if got := <-relay; got != want {
			t.Fatalf("relayed %v, want %v", got, want)
		}
	}
	close(src)
	if _, ok := <-relay; ok {
		t.Fatal("relay still open after the watcher's channel closed")
	}
}
