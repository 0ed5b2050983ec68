package iptables

import (
	"fmt"

	"github.com/wasp-proxy/wasp/backends"
)

// validate checks that s can be programmed by a Backend of family: s is
// of that family and keeps the backends contract (backends.Validate). The
// error wraps ErrInvalidState and names every problem.
func validate(family backends.Family, s *backends.State) error {
	if s != nil && s.Family != family {
		return fmt.Errorf("iptables: %w: family %s, want %s", ErrInvalidState, s.Family.String(), family.String())
	}
	if err := backends.Validate(s); err != nil {
		return fmt.Errorf("iptables: %w", err)
	}
	return nil
}
