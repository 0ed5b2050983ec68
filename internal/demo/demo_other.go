//go:build !linux

package demo

import (
	"context"
	"errors"
)

// Run runs the demo. It needs Linux: network namespaces and nftables.
func Run(ctx context.Context, opts Opts) error {
	return errors.New("demo: needs Linux (network namespaces and nftables)")
}
