package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/reference/referencetest"
	"github.com/wasp-proxy/wasp/host/runtime"
)

func newModuleBenchCommand() *cobra.Command {
	var (
		moduleFlags     []string
		configFlags     []string
		cacheDir        string
		ports, eps, run int
	)
	cmd := &cobra.Command{
		Use:   "bench --module STAGE=SOURCE...",
		Short: "Time a module chain over a realistic batch, against the builtin chain in the same run",
		Long: `bench evaluates a generated batch of service ports (a mix of traffic
policies, topology hints, terminating and remote endpoints, as the
reference tests use) through the chain with the given modules and through
the builtin chain, one full recompute per run, alternating, and prints the
median time of each, the time per service port, the ports that fell back
after a module failure, and the ratio to the builtin chain.`,
		Example: `  wasp module bench --module endpoint-selection=./zone-drain.wasm
  wasp module bench --module endpoint-selection=./m.wasm --ports 1000 --runs 10
  wasp module bench --module endpoint-selection=./zone-drain.wasm --config drain.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ports <= 0 || eps <= 0 || run <= 0 {
				return fmt.Errorf("--ports, --endpoints and --runs must be positive")
			}
			specs, err := moduleFlagSpecs(moduleFlags, configFlags)
			if err != nil {
				return err
			}
			rt, err := runtime.New(runtime.Config{CacheDir: cacheDir, IsolateCompile: true})
			if err != nil {
				return err
			}
			defer rt.Close(cmd.Context())
			under, err := chain.Load(cmd.Context(), rt, specs)
			if err != nil {
				return err
			}
			defer under.Close()
			builtin, err := chain.Load(cmd.Context(), rt, nil)
			if err != nil {
				return err
			}
			defer builtin.Close()

			node, sps := referencetest.Batch(1, ports, eps)
			batch := make([]pipeline.Port, len(sps))
			for i, sp := range sps {
				batch[i] = pipeline.Port{Key: fmt.Sprintf("port-%d", i), ServicePort: sp}
			}
			chains := []struct {
				name string
				p    *pipeline.Pipeline
				d    []time.Duration
				fail int
			}{
				{name: "modules", p: pipeline.New(pipeline.Options{Modules: under.PipelineModules()})},
				{name: "builtin", p: pipeline.New(pipeline.Options{Modules: builtin.PipelineModules()})},
			}
			for i := range chains { // warm-up: instances, caches
				chains[i].p.Run(cmd.Context(), node, batch)
			}
			for range run {
				for i := range chains {
					d, failed := timeRun(cmd.Context(), chains[i].p, node, batch)
					chains[i].d = append(chains[i].d, d)
					chains[i].fail = max(chains[i].fail, failed)
				}
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "%d service ports x %d endpoints, median of %d full recomputes\n", ports, eps, run)
			fmt.Fprintln(w, "CHAIN\tMEDIAN\tPER PORT\tFAILED PORTS")
			med := make([]time.Duration, len(chains))
			for i, c := range chains {
				med[i] = median(c.d)
				fmt.Fprintf(w, "%s\t%v\t%v\t%d\n", c.name, med[i].Round(time.Microsecond), (med[i] / time.Duration(ports)).Round(time.Nanosecond), c.fail)
			}
			fmt.Fprintf(w, "ratio modules/builtin: %.2f\n", float64(med[0])/float64(med[1]))
			cmd.SilenceUsage = true
			return w.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&configFlags, "config", nil, configFlagUsage)
	cmd.Flags().StringArrayVar(&moduleFlags, "module", nil, "STAGE=SOURCE: the module under test for a stage (repeatable)")
	cmd.Flags().StringVar(&cacheDir, "cache-dir", defaultCacheDir(), `where compiled modules are cached across runs ("": no cache)`)
	cmd.Flags().IntVar(&ports, "ports", 10000, "service ports in the batch")
	cmd.Flags().IntVar(&eps, "endpoints", 10, "endpoints per service port")
	cmd.Flags().IntVar(&run, "runs", 5, "full recomputes timed per chain")
	return cmd
}

// timeRun times one full recompute and counts the ports that fell back.
func timeRun(ctx context.Context, p *pipeline.Pipeline, node abi.Node, batch []pipeline.Port) (time.Duration, int) {
	start := time.Now()
	res := p.Run(ctx, node, batch)
	d := time.Since(start)
	failed := 0
	for _, r := range res {
		if r.Source != pipeline.SourceModules {
			failed++
		}
	}
	return d, failed
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
