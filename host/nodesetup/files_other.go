//go:build !linux

package nodesetup

import "fmt"

// inNetNS runs f, and fails for another network namespace: they are a
// Linux facility.
func inNetNS(path string, f func() error) error {
	if path != "" {
		return fmt.Errorf("network namespace %q: %w", path, ErrNotSupported)
	}
	return f()
}
