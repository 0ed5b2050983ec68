package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

func newCleanupCommand(e env) *cobra.Command {
	var families []string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove everything wasp programmed on this node and exit",
		Long: `cleanup deletes wasp's nftables tables, of both IP families, as kube-proxy's
--cleanup does; wasp run --cleanup is the same. It succeeds when there is
nothing to remove. Connection tracking entries are left to expire.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fams, err := parseIPFamilies(families)
			if err != nil {
				return err
			}
			return cleanup(cmd.Context(), e, fams)
		},
	}
	cmd.Flags().StringSliceVar(&families, "ip-families", nil, "the IP families to clean up: ipv4, ipv6 or both (default both)")
	return cmd
}

// cleanup removes the dataplane of families (nil: both).
func cleanup(ctx context.Context, e env, families []backends.Family) error {
	logger := klog.FromContext(ctx)
	if len(families) == 0 {
		families = []backends.Family{backends.IPv4, backends.IPv6}
	}
	var errs []error
	for _, f := range families {
		b, err := e.dataplane(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("cleanup %s: %w", familyName(f), err))
			continue
		}
		if err := b.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cleanup %s: %w", familyName(f), err))
		} else {
			logger.V(2).Info("Cleaned up", "ipFamily", familyName(f))
		}
		if err := b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cleanup %s: close: %w", familyName(f), err))
		}
	}
	return errors.Join(errs...)
}
