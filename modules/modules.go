// Package modules embeds wasp's default policy modules: upstream
// kube-proxy's Service semantics, one module per stage, built from the
// sources in this directory by `make modules`. wasp starts on them without
// a registry.
package modules

import (
	"embed"
	"fmt"

	"github.com/wasp-proxy/wasp/abi"
)

//go:embed wasm/*.wasm
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

// Wasm returns the embedded binary of the builtin module name.
func Wasm(name string) ([]byte, error) {
	for _, b := range Builtins {
		if b.Name == name {
			return files.ReadFile("wasm/" + b.Dir + ".wasm")
		}
	}
	return nil, fmt.Errorf("no builtin module %q", name)
}
