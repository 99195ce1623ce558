//go:build !linux

package main

import (
	"context"
	"time"
)

// watchDir sends a value every millisecond until ctx ends: without
// inotify, the loop looks at the directory that often.
func watchDir(ctx context.Context, _ string) (<-chan struct{}, error) {
	out := make(chan struct{})
	go func() {
		defer close(out)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				select {
				case out <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
