// Package modules embeds wasp's default policy modules: upstream
// kube-proxy's Service semantics, one module per stage, built from the
// sources in this directory by `make modules`. wasp starts on them without
// a registry.
//
// Each module is written twice, with the same semantics line for line: in
// Go (DIR/main.go, the Go SDK's reference modules and a vendor's starting
// point) and in Rust (DIR/lib.rs, beside it and its module.json, with the
// Rust SDK). Both are built, into builds/go and builds/rust, and both are
// held against the native reference by the same tests (package
// modules/builds lists them); wasp embeds one of them, the build named by
// Build, as builtin:<Name>: the Rust build, 30 KB a module against 2.4 MB,
// compiled in 0.03 s against 1 s, and the chain twice as fast
// (RATIONALE.md, "Why is each default module written twice, in Go and in
// Rust?" and "Why does wasp embed the Rust build of its default modules?").
package modules

import (
	"embed"
	"fmt"
	"strings"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
)

// Build names the build wasp embeds: "go" or "rust", the directory of
// modules/builds that files embeds (a go:embed pattern cannot name a
// constant; package builds' tests check that the two agree).
const Build = "rust"

// files holds the built modules, their digests (SHA256SUMS, written by
// `make modules` beside them) and their metadata sources: Digest and
// Metadata answer without reading a module's bytes, so that a wasp that
// runs the builtin modules natively never pages them in.
//
//go:embed builds/rust/*.wasm builds/rust/SHA256SUMS topology/module.json trafficpolicy/module.json selection/module.json
var files embed.FS

// Builtin is one embedded module.
type Builtin struct {
	// Name is the module's name, as in "builtin:<Name>".
	Name string
	// Stage is the stage the module implements.
	Stage abi.Stage
	// Dir is the module's source directory, relative to this package.
	Dir string
}

// Builtins lists the default modules in pipeline order.
var Builtins = []Builtin{
	{Name: "topology", Stage: abi.StageTopology, Dir: "topology"},
	{Name: "trafficpolicy", Stage: abi.StageTrafficPolicy, Dir: "trafficpolicy"},
	{Name: "selection", Stage: abi.StageEndpointSelection, Dir: "selection"},
}

// Default returns the builtin module for stage.
func Default(stage abi.Stage) Builtin {
	for _, b := range Builtins {
		if b.Stage == stage {
			return b
		}
	}
	panic(fmt.Sprintf("modules: no builtin for stage %d", stage))
}

// Source returns the module source that names b: "builtin:<Name>".
func (b Builtin) Source() string { return "builtin:" + b.Name }

func lookup(name string) (Builtin, error) {
	for _, b := range Builtins {
		if b.Name == name {
			return b, nil
		}
	}
	return Builtin{}, fmt.Errorf("no builtin module %q", name)
}

// Wasm returns the embedded binary of the builtin module name.
func Wasm(name string) ([]byte, error) {
	b, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return files.ReadFile("builds/" + Build + "/" + b.Dir + ".wasm")
}

// Digest returns "sha256:<hex>" of the embedded binary of the builtin
// module name, as runtime.Digest would, from its build's SHA256SUMS.
func Digest(name string) (string, error) {
	b, err := lookup(name)
	if err != nil {
		return "", err
	}
	sums, err := files.ReadFile("builds/" + Build + "/SHA256SUMS")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(sums), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if ok && file == b.Dir+".wasm" {
			return "sha256:" + sum, nil
		}
	}
	return "", fmt.Errorf("builtin module %q: no digest in builds/%s/SHA256SUMS (run make modules)", name, Build)
}

// Metadata returns the metadata of the builtin module name: its
// module.json, which the Go build embeds and the Rust build's module!
// declares (`make modules` refuses a Rust build whose metadata differs).
func Metadata(name string) (*metadata.Metadata, error) {
	b, err := lookup(name)
	if err != nil {
		return nil, err
	}
	src, err := files.ReadFile(b.Dir + "/module.json")
	if err != nil {
		return nil, err
	}
	m, err := metadata.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("builtin module %q: %w", name, err)
	}
	return m, nil
}
