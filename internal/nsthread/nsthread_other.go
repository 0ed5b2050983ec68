//go:build !linux

package nsthread

import (
	"errors"
	"fmt"
)

// ErrNotSupported is returned for another network namespace where there
// are none.
var ErrNotSupported = errors.New("network namespaces are a Linux facility")

// Do runs f, and fails for another network namespace (path not "").
func Do(path string, f func() error) error {
	if path != "" {
		return fmt.Errorf("network namespace %q: %w", path, ErrNotSupported)
	}
	return f()
}
