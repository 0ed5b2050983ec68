package iptables

import "context"

// New returns a Backend that programs the node's iptables. The kernel
// adapter is not built yet: it returns ErrNotSupported.
func New(ctx context.Context, o Opts) (*Backend, error) {
	return nil, ErrNotSupported
}
