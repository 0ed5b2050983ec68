//go:build linux

package nsthread

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs f inside the network namespace at path (a bind mount such as
// /run/netns/NAME, or /proc/PID/ns/net) on a fresh OS thread that is
// discarded afterwards. With path "", f runs in the caller's namespace
// and goroutine.
func Do(path string, f func() error) error {
	if path == "" {
		return f()
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open network namespace %q: %w", path, err)
	}
	defer h.Close()
	return Fresh(func() error {
		if err := netns.Set(h); err != nil {
			return fmt.Errorf("enter network namespace %q: %w", path, err)
		}
		return f()
	})
}

// Fresh runs f on a new goroutine locked to its OS thread, which it never
// unlocks: the thread exits with the goroutine, taking with it whatever f
// changed about it (its network namespace). A panic in f is returned as
// an error.
func Fresh(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic on a namespace thread: %v", r)
			}
		}()
		errc <- f()
	}()
	return <-errc
}
