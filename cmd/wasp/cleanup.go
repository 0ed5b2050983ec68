package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/wasp-proxy/wasp/backends"
)

func newCleanupCommand(e env) *cobra.Command {
	var families []string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove everything wasp programmed on this node and exit",
		Long: `cleanup removes what wasp left behind in every proxy mode, as kube-proxy's
--cleanup does: the nftables tables "ip wasp" and "ip6 wasp", and the WASP-
chains (and the jumps to them) of iptables and ip6tables, in both the nft and
the legacy variant. It logs what it removes, and prints for each mode that
none of its objects is left; wasp run --cleanup is the same. It succeeds when there is nothing to remove. Connection tracking
entries are left to expire.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fams, err := parseIPFamilies(families)
			if err != nil {
				return err
			}
			return cleanup(cmd.Context(), cmd.OutOrStdout(), e, fams)
		},
	}
	cmd.Flags().StringSliceVar(&families, "ip-families", nil, "the IP families to clean up: ipv4, ipv6 or both (default both); the iptables mode always cleans both")
	return cmd
}

// cleanup removes the dataplane of every mode, of families (nil: both),
// and writes to out, for each mode that succeeded, that none of its
// objects is left (the backends log what they removed).
func cleanup(ctx context.Context, out io.Writer, e env, families []backends.Family) error {
	if len(families) == 0 {
		families = []backends.Family{backends.IPv4, backends.IPv6}
	}
	var errs []error
	for _, m := range e.modes {
		if err := m.CleanupLeftovers(ctx, "", families); err != nil {
			errs = append(errs, fmt.Errorf("cleanup %s: %w", m.Name, err))
			continue
		}
		fmt.Fprintf(out, "%s: none left of %s\n", m.Name, m.Leftovers)
	}
	return errors.Join(errs...)
}
