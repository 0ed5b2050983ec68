package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
)

func newModuleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "module",
		Short: "Build and inspect policy modules",
	}
	cmd.AddCommand(newModuleBuildCommand(), newModuleInspectCommand())
	return cmd
}

func newModuleBuildCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "build DIR",
		Short: "Build a Go module directory (main package + module.json) into an annotated .wasm",
		Long: `build compiles the Go main package in DIR with GOOS=wasip1 GOARCH=wasm as a
reactor (-buildmode=c-shared), reproducibly (-trimpath, no VCS stamp, no build
ID), and embeds DIR/module.json as the module's metadata section.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			wasm, err := modbuild.Build(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if out == "" {
				out = filepath.Base(filepath.Clean(args[0])) + ".wasm"
			}
			return os.WriteFile(out, wasm, 0o644)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "output file (default DIR's base name + .wasm)")
	return cmd
}

func newModuleInspectCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect SOURCE",
		Short: "Print a module's ABI version, stages, metadata and digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			wasm, err := chain.Read(args[0])
			if err != nil {
				return err
			}
			meta, err := runtime.Inspect(wasm)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				Source   string `json:"source"`
				Digest   string `json:"digest"`
				Size     int    `json:"size"`
				Metadata any    `json:"metadata"`
			}{args[0], runtime.Digest(wasm), len(wasm), meta})
		},
	}
}
