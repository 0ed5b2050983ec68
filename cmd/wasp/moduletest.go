package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/wasp-proxy/wasp/host/moduletest"
	"github.com/wasp-proxy/wasp/host/runtime"
)

func newModuleTestCommand() *cobra.Command {
	var (
		moduleFlags []string
		configFlags []string
		cacheDir    string
	)
	cmd := &cobra.Command{
		Use:   "test SCENARIO.yaml...",
		Short: "Run modules against scenario files of Kubernetes objects with expected results",
		Long: `test runs the module chain over each case of each scenario file (a
ModuleTest: an objects file, a node, and what each Service port must give,
as wasp explain prints it) and reports every mismatch. It exits non-zero if
a case fails: the harness for a module's CI. --module entries take their
stage before the scenario's own modules; --config gives one of them its
configuration, which a case may replace (config, rejected). See
host/moduletest for the format.`,
		Example: `  wasp module test testdata/scenario.yaml
  wasp module test --module endpoint-selection=./module.wasm testdata/*.yaml
  wasp module test --module endpoint-selection=./module.wasm --config config.yaml testdata/scenario.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			extra, err := moduleFlagSpecs(moduleFlags, configFlags)
			if err != nil {
				return err
			}
			rt, err := runtime.New(runtime.Config{CacheDir: cacheDir, IsolateCompile: true})
			if err != nil {
				return err
			}
			defer rt.Close(cmd.Context())
			var all []moduletest.Result
			for _, path := range args {
				s, err := moduletest.Load(path)
				if err != nil {
					return err
				}
				results, err := moduletest.Run(cmd.Context(), rt, s, s.Specs(extra))
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				for i := range results {
					results[i].Case = path + ": " + results[i].Case
				}
				all = append(all, results...)
			}
			cmd.SilenceUsage = true
			return moduletest.Report(cmd.OutOrStdout(), all)
		},
	}
	cmd.Flags().StringArrayVar(&configFlags, "config", nil, configFlagUsage)
	cmd.Flags().StringArrayVar(&moduleFlags, "module", nil, "STAGE=SOURCE: the module under test for a stage (repeatable)")
	cmd.Flags().StringVar(&cacheDir, "cache-dir", defaultCacheDir(), `where compiled modules are cached across runs ("": no cache)`)
	return cmd
}
