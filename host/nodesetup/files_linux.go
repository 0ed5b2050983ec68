//go:build linux

package nodesetup

import "github.com/wasp-proxy/wasp/internal/nsthread"

// inNetNS runs f in the network namespace at path, or in the current one
// if path is empty. It uses a locked OS thread that is thrown away
// afterwards, so no other goroutine ever runs in the namespace.
func inNetNS(path string, f func() error) error {
	return nsthread.Do(path, f)
}
