package nftables

import (
	"fmt"

	"github.com/wasp-proxy/wasp/backends"
)

// validate checks that s can be programmed in a table of family: s is of
// that family and keeps the backends contract (backends.Validate). The
// error wraps ErrInvalidState and names every problem.
func validate(family backends.Family, s *backends.State) error {
	if s != nil && s.Family != family {
		return fmt.Errorf("nftables: %w: family %s, want %s", ErrInvalidState, s.Family.String(), family.String())
	}
	if err := backends.Validate(s); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}
