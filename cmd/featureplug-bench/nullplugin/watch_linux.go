package main

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// watchDir sends a value whenever an entry of dir is created, deleted or
// renamed, until ctx ends. It reads inotify through the runtime's poller,
// so no thread waits on it.
func watchDir(ctx context.Context, dir string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("watching %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	out := make(chan struct{}, 1)
	go func() {
		<-ctx.Done()
		_ = f.Close()
	}()
	go func() {
		defer close(out)
		buf := make([]byte, 64<<10)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			select {
			case out <- struct{}{}:
			default: // one wake-up covers every change since the last look
			}
		}
	}()
	return out, nil
}
