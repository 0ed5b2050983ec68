// Command rustmodule builds one of wasp's default modules from its Rust
// source, lib.rs beside the module's Go sources, into a .wasm file, for
// `make modules`:
//
//	go run ./internal/rustbuild/rustmodule -o modules/builds/rust/topology.wasm modules/topology
//
// The build is reproducible (rustbuild's Fast profile: paths remapped,
// symbols stripped, one codegen unit), but its bytes hang on the compiler:
// it refuses a rustc other than the one the committed modules were built
// with (Pinned), so that `make modules-check` fails on a real drift and not
// on a toolchain. It also refuses a module whose metadata section, which the
// Rust SDK's module! macro writes, differs from its module.json, which the
// Go build embeds and wasp reports for the builtin modules.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/modbuild"
	"github.com/wasp-proxy/wasp/internal/rustbuild"
)

// Pinned is the rustc the committed Rust builds of the default modules
// come from: Debian 12's rustc package, with libstd-rust-dev-wasm32.
const Pinned = "rustc 1.63.0"

func main() {
	out := flag.String("o", "", "output file (required)")
	sdk := flag.String("sdk", filepath.Join("sdk", "rust"), "the Rust SDK's directory")
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: rustmodule -o OUT.wasm MODULE-DIR")
		os.Exit(2)
	}
	if err := build(context.Background(), *sdk, flag.Arg(0), *out); err != nil {
		fmt.Fprintln(os.Stderr, "rustmodule:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, sdk, dir, out string) error {
	tc, err := rustbuild.FindVersion(ctx, Pinned)
	if err != nil {
		return fmt.Errorf("the default modules are built with %s (Debian 12's rustc and libstd-rust-dev-wasm32; RUSTC names the rustc to use): %w", Pinned, err)
	}
	want, err := modbuild.ReadMetadata(dir)
	if err != nil {
		return err
	}
	wasm, err := tc.BuildProfile(ctx, rustbuild.Paths{SDK: sdk, Module: dir, Root: "lib.rs"}, rustbuild.Fast)
	if err != nil {
		return err
	}
	got, err := runtime.Inspect(wasm)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("%s: lib.rs's metadata %+v differs from module.json's %+v", dir, *got, *want)
	}
	return os.WriteFile(out, wasm, 0o644)
}
