// Command wasp is the WebAssembly Service Proxy: a kube-proxy replacement
// whose Service semantics run as sandboxed WebAssembly modules.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/printable"
)

// version is the wasp version, the one modules' minHostVersion is checked against.
var version = runtime.HostVersion

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		// Errors may quote a module's own text.
		fmt.Fprintln(os.Stderr, "wasp:", printable.String(err.Error()))
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command { return newRootCommandWith(defaultEnv()) }

// newRootCommandWith returns the command tree over e, which tests replace.
func newRootCommandWith(e env) *cobra.Command {
	root := &cobra.Command{
		Use:   "wasp",
		Short: "WebAssembly Service Proxy: a kube-proxy replacement with Service semantics in Wasm modules",
		Long: `wasp proxies Kubernetes Services on a node, like kube-proxy. The meaning of a
Service on the node (topology, traffic policy, endpoint selection) is computed
by versioned, sandboxed WebAssembly modules; the defaults reproduce upstream
kube-proxy exactly.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlag(klogFlags.Lookup("v"))
	actAsRun(root, e) // wasp --config FILE ..., as kube-proxy
	root.AddCommand(newRunCommand(e), newCleanupCommand(e), newDemoCommand(), newExplainCommand(), newModuleCommand(), newVersionCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the wasp version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version)
			return err
		},
	}
}
