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
		i, path, err := flagSpec(specs, "config", "FILE", c)
		if err != nil {
			return nil, err
		}
		config, err := readModuleConfig(path)
		if err != nil {
			return nil, fmt.Errorf("--config %q: %w", c, err)
		}
		specs[i].Config = config
	}
	return specs, nil
}

// flagSpec resolves the value of a per-module flag, [STAGE=]VALUE (the
// stage may be left out when there is one --module), to the index of its
// spec and VALUE; what names VALUE in errors.
func flagSpec(specs []chain.Spec, flag, what, value string) (int, string, error) {
	name, rest, ok := strings.Cut(value, "=")
	switch {
	case !ok && len(specs) != 1:
		return 0, "", fmt.Errorf("--%s %q: want STAGE=%s with %d --module entries", flag, value, what, len(specs))
	case !ok:
		return 0, value, nil
	}
	stage, known := abi.ParseStage(name)
	if !known {
		return 0, "", fmt.Errorf("--%s %q: unknown stage %q (want topology, traffic-policy or endpoint-selection)", flag, value, name)
	}
	i := slices.IndexFunc(specs, func(s chain.Spec) bool { return s.Stage == stage })
	if i < 0 {
		return 0, "", fmt.Errorf("--%s %q: no --module for stage %s", flag, value, stage)
	}
	return i, rest, nil
}

// guardrailsFlagUsage describes --guardrails.
const guardrailsFlagUsage = "[STAGE=]allowNotServing,allowRemoteInLocal: relax host-enforced invariants for the --module of STAGE, or of the only --module, as a configuration's modules[].guardrails does (repeatable)"

// applyGuardrailFlags relaxes the guardrails of specs as --guardrails
// entries say.
func applyGuardrailFlags(specs []chain.Spec, flags []string) error {
	for _, f := range flags {
		i, list, err := flagSpec(specs, "guardrails", "GUARDRAIL[,GUARDRAIL]", f)
		if err != nil {
			return err
		}
		if specs[i].Stage != abi.StageTrafficPolicy {
			return fmt.Errorf("--guardrails %q: only a traffic-policy module puts endpoints into sets", f)
		}
		for g := range strings.SplitSeq(list, ",") {
			switch strings.TrimSpace(g) {
			case "allowNotServing":
				specs[i].Guardrails.AllowNotServing = true
			case "allowRemoteInLocal":
				specs[i].Guardrails.AllowRemoteInLocal = true
			default:
				return fmt.Errorf("--guardrails %q: unknown guardrail %q (want allowNotServing or allowRemoteInLocal)", f, g)
			}
		}
	}
	return nil
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
