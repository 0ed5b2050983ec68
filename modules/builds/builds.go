// Package builds holds both builds of wasp's default modules: from their
// Go sources (modules/DIR/main.go, GOOS=wasip1) and from their Rust
// sources (modules/DIR/lib.rs, wasm32-unknown-unknown), written by `make
// modules` into go/ and rust/ with a SHA256SUMS each, and drift-checked by
// `make modules-check`.
//
// wasp embeds one of them (package modules, modules.Build); this package
// embeds both, for the tests and benchmarks that run each build against
// the native reference, and for nothing else: importing it puts both
// builds in the binary.
package builds

import (
	"embed"
	"fmt"

	"github.com/wasp-proxy/wasp/modules"
)

//go:embed go/*.wasm go/SHA256SUMS rust/*.wasm rust/SHA256SUMS
var files embed.FS

// Build names a build of the default modules by the language of its
// sources, which is also its directory.
type Build string

// The builds.
const (
	Go   Build = "go"
	Rust Build = "rust"
)

// All lists the builds.
var All = []Build{Go, Rust}

// Wasm returns the bytes of the default module name (modules.Builtins) in
// build b.
func Wasm(b Build, name string) ([]byte, error) {
	for _, m := range modules.Builtins {
		if m.Name == name {
			return files.ReadFile(string(b) + "/" + m.Dir + ".wasm")
		}
	}
	return nil, fmt.Errorf("no builtin module %q", name)
}

// SHA256SUMS returns the SHA256SUMS file of build b.
func SHA256SUMS(b Build) ([]byte, error) { return files.ReadFile(string(b) + "/SHA256SUMS") }
