package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/internal/localfile"
)

// configFlagUsage documents --config of the module commands.
const configFlagUsage = "[STAGE=]FILE: the configuration (a YAML or JSON object) of the --module of STAGE, or of the only --module (repeatable)"

// moduleFlagSpecs returns the specs of --module entries (STAGE=SOURCE)
// with the configurations of --config entries ([STAGE=]FILE; the stage
// may be left out when there is one --module).
func moduleFlagSpecs(modules, configs []string) ([]chain.Spec, error) {
	var specs []chain.Spec
	for _, m := range modules {
		s, err := chain.ParseSpec(m)
		if err != nil {
			return nil, fmt.Errorf("--module: %w", err)
		}
		specs = append(specs, s)
	}
	for _, c := range configs {
		name, path, ok := strings.Cut(c, "=")
		i := 0
		switch {
		case !ok && len(specs) != 1:
			return nil, fmt.Errorf("--config %q: want STAGE=FILE with %d --module entries", c, len(specs))
		case !ok:
			path = c
		default:
			stage, known := abi.ParseStage(name)
			if !known {
				return nil, fmt.Errorf("--config %q: unknown stage %q (want topology, traffic-policy or endpoint-selection)", c, name)
			}
			if i = slices.IndexFunc(specs, func(s chain.Spec) bool { return s.Stage == stage }); i < 0 {
				return nil, fmt.Errorf("--config %q: no --module for stage %s", c, stage)
			}
		}
		config, err := readModuleConfig(path)
		if err != nil {
			return nil, fmt.Errorf("--config %q: %w", c, err)
		}
		specs[i].Config = config
	}
	return specs, nil
}

// readModuleConfig reads a module's configuration file, YAML or JSON, as
// JSON; it must hold an object.
func readModuleConfig(path string) ([]byte, error) {
	b, err := localfile.Read(path, maxConfigFileSize)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, err
	}
	if j = bytes.TrimSpace(j); len(j) > 0 && string(j) != "null" && j[0] != '{' {
		return nil, fmt.Errorf("%s: want an object, got %.40s", path, j)
	}
	return j, nil
}
