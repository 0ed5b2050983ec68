package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/wasp-proxy/wasp/internal/demo"
)

func newDemoCommand() *cobra.Command {
	var (
		opts    demo.Opts
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run wasp on a throwaway two-node lab and send it traffic (Linux, root)",
		Long: `demo shows wasp programming a real kernel, with no cluster. It builds a lab of
network namespaces (node-a with pods web-1 and web-2, node-b with pod web-3,
and a client), runs wasp run inside node-a over the bundled cluster
(examples/demo/cluster.yaml, through the snapshot source), waits until the
dataplane is programmed, sends requests to the ClusterIP and the NodePorts
from the client and from node-a, prints who answered, edits the snapshot
and shows the dataplane follow, then removes everything it created, also
when interrupted.

It needs root, to create network namespaces and program their dataplane
(nftables, or iptables with --proxy-mode iptables).`,
		Example: `  make build && sudo bin/wasp demo
  sudo bin/wasp demo --proxy-mode iptables
  sudo bin/wasp demo --module endpoint-selection=zone-spillover.wasm`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: the wasp binary to run: %w", err)
			}
			opts.Wasp, opts.Out = exe, cmd.OutOrStdout()
			if verbose {
				opts.ProxyLog = cmd.ErrOrStderr()
			}
			return demo.Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.Requests, "requests", demo.DefaultRequests, "requests per target")
	cmd.Flags().StringArrayVar(&opts.Modules, "module", nil, "STAGE=SOURCE: a module for the proxy (repeatable), as wasp run's")
	cmd.Flags().BoolVar(&verbose, "proxy-log", false, "copy the proxy's log to stderr")
	cmd.Flags().StringVar(&opts.ProxyMode, "proxy-mode", "", `the proxy's --proxy-mode: "nftables" or "iptables" ("": wasp run's default)`)
	return cmd
}
