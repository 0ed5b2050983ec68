package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/wasp-proxy/wasp/examples/cluster"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/explain"
	"github.com/wasp-proxy/wasp/host/objects"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
)

func newExplainCommand() *cobra.Command {
	var (
		file, node, output, cacheDir string
		moduleFlags, configFlags     []string
		guardrailFlags               []string
	)
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Show what a node does with each Service port",
		Long: `explain reads Kubernetes objects (Nodes, Services, EndpointSlices: multi-document
YAML or JSON, or List kinds as kubectl get -o yaml prints them), runs the module
chain for one node, and prints one document per service port: the cluster,
local and all-reachable endpoints, hasAnyEndpoints and the endpoint weights.

Without -f it explains the bundled sample cluster (examples/cluster/sample.yaml).`,
		Example: `  wasp explain --node node-a
  kubectl get nodes,services,endpointslices -A -o yaml | wasp explain -f - --node worker-1 -o table
  wasp explain -f cluster.yaml --node node-a --module endpoint-selection=./zone-spillover.wasm
  wasp explain --node node-a --module endpoint-selection=./zone-drain.wasm --config drain.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "json" && output != "table" {
				return fmt.Errorf("--output %q: want json or table", output)
			}
			specs, err := moduleFlagSpecs(moduleFlags, configFlags)
			if err == nil {
				err = applyGuardrailFlags(specs, guardrailFlags)
			}
			if err != nil {
				return err
			}
			objs, err := readObjects(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rt, err := runtime.New(runtime.Config{CacheDir: cacheDir, IsolateCompile: true})
			if err != nil {
				return err
			}
			defer rt.Close(ctx)
			c, err := chain.Load(ctx, rt, specs)
			if err != nil {
				return err
			}
			defer c.Close()
			docs, err := explain.Explain(ctx, objs, node, pipeline.New(pipeline.Options{Modules: c.PipelineModules()}))
			if err != nil {
				return err
			}
			for _, d := range docs {
				if d.Error != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s port %q (%s): %s decision after a module failure: %s\n",
						d.Service, d.Port, d.IPFamily, d.Source, d.Error)
				}
			}
			// Render fully before writing, so that nothing is half-printed.
			var buf bytes.Buffer
			if output == "table" {
				err = explain.WriteTable(&buf, docs)
			} else {
				err = explain.WriteJSON(&buf, docs)
			}
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(buf.Bytes())
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `objects to read ("-" for stdin; default: the bundled sample cluster)`)
	cmd.Flags().StringVar(&node, "node", "node-a", "the node to explain")
	cmd.Flags().StringVarP(&output, "output", "o", "json", "json (one document per line) or table")
	cmd.Flags().StringVar(&cacheDir, "cache-dir", defaultCacheDir(), "where compiled modules are cached across runs (\"\" disables the cache)")
	cmd.Flags().StringArrayVar(&moduleFlags, "module", nil, "STAGE=SOURCE: run a module instead of the builtin one (repeatable); SOURCE is builtin:NAME, file:///PATH or a path")
	cmd.Flags().StringArrayVar(&configFlags, "config", nil, configFlagUsage)
	cmd.Flags().StringArrayVar(&guardrailFlags, "guardrails", nil, guardrailsFlagUsage)
	return cmd
}

// defaultCacheDir is the user's cache directory for compiled modules, or
// "" (no cache) when there is none.
func defaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "wasp", "compiled")
}

func readObjects(stdin io.Reader, file string) (*objects.Objects, error) {
	switch file {
	case "":
		return objects.Decode(bytes.NewReader(cluster.Sample), "sample.yaml")
	case "-":
		return objects.Decode(stdin, "<stdin>")
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return objects.Decode(f, file)
}
