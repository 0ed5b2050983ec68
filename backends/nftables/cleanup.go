package nftables

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/wasp-proxy/wasp/backends"
)

// CleanupLeftovers deletes wasp's table (DefaultTable) of each of
// families in the network namespace at netns ("" for the current one),
// whatever a previous process programmed in it. A missing table is no
// error, and neither is a node without nftables (not Linux, or a kernel
// without nf_tables): it has none to delete. Every other failure is
// returned, joined.
func CleanupLeftovers(ctx context.Context, netns string, families []backends.Family) error {
	var errs []error
	for _, f := range families {
		b, err := New(Opts{Family: f, NetNS: netns})
		if err == nil {
			err = errors.Join(b.Cleanup(ctx), b.Close())
		}
		if err != nil && !noNFTables(err) {
			errs = append(errs, fmt.Errorf("nftables %s: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

// noNFTables reports whether err says the node has no nftables at all.
func noNFTables(err error) bool {
	return errors.Is(err, backends.ErrNotSupported) || errors.Is(err, syscall.EPROTONOSUPPORT) || errors.Is(err, syscall.EAFNOSUPPORT)
}
