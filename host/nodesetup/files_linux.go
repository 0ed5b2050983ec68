//go:build linux

package nodesetup

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// inNetNS runs f in the network namespace at path, or in the current one
// if path is empty. It uses a locked OS thread that is thrown away
// afterwards, so no other goroutine ever runs in the namespace.
func inNetNS(path string, f func() error) error {
	if path == "" {
		return f()
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open network namespace %q: %w", path, err)
	}
	defer h.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter network namespace %q: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
