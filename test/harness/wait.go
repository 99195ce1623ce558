package harness

import (
	"context"
	"fmt"
	"os"
	"time"
)

// poll calls cond until it reports done, returns an error (which ends the
// wait at once), or ctx ends; the error then carries cond's last description
// of the state.
func poll(ctx context.Context, cond func() (done bool, state string, err error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, state, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last state: %s", ctx.Err(), state)
		case <-t.C:
		}
	}
}

// fileTail returns the last n lines of a file.
func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	return tail(string(b), n)
}
