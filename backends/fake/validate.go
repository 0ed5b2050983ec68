package fake

import "github.com/wasp-proxy/wasp/backends"

// Validate checks s against the backends contract: see backends.Validate,
// which it is. A Fake refuses exactly what a real backend refuses.
func Validate(s *backends.State) error { return backends.Validate(s) }
