// Package metadata is the module metadata format of ABI v1: what a module
// declares about itself in its abi.abi.MetadataSection custom section.
package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/wasp-proxy/wasp/abi"
)

// Metadata describes a module. It is stored as JSON in the module's
// abi.MetadataSection custom section, so the host can read it before compiling
// the module, and copied into OCI manifest annotations when the module is
// pushed.
type Metadata struct {
	// Name identifies the module, a DNS-1123 label such as "topology".
	Name string `json:"name"`
	// Version is the module's semantic version, such as "1.0.0".
	Version string `json:"version"`
	// ABI is the ABI version the module speaks; it must match its marker
	// export (wasp_abi_v1 for 1).
	ABI int `json:"abi"`
	// Stages lists the stages the module implements, by name.
	Stages []string `json:"stages"`
	// MinHostVersion is the oldest wasp version the module works with.
	MinHostVersion string `json:"minHostVersion,omitempty"`
	// Description says what the module does, for `wasp module inspect`.
	Description string `json:"description,omitempty"`
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	semverRE = regexp.MustCompile(`^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
)

// Parse decodes and validates a metadata section payload.
func Parse(payload []byte) (*Metadata, error) {
	var m Metadata
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("module metadata: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate reports every problem with the metadata, each naming its field.
func (m *Metadata) Validate() error {
	var errs []error
	if !nameRE.MatchString(m.Name) {
		errs = append(errs, fmt.Errorf("metadata.name: %q is not a DNS-1123 label", m.Name))
	}
	if !semverRE.MatchString(m.Version) {
		errs = append(errs, fmt.Errorf("metadata.version: %q is not a semantic version", m.Version))
	}
	if m.ABI != abi.Version {
		errs = append(errs, fmt.Errorf("metadata.abi: %d is not supported (this host speaks ABI %d)", m.ABI, abi.Version))
	}
	if len(m.Stages) == 0 {
		errs = append(errs, errors.New("metadata.stages: at least one stage is required"))
	}
	seen := map[string]bool{}
	for i, s := range m.Stages {
		if _, ok := abi.ParseStage(s); !ok {
			errs = append(errs, fmt.Errorf("metadata.stages[%d]: unknown stage %q", i, s))
		} else if seen[s] {
			errs = append(errs, fmt.Errorf("metadata.stages[%d]: duplicate stage %q", i, s))
		}
		seen[s] = true
	}
	if m.MinHostVersion != "" && !semverRE.MatchString(m.MinHostVersion) {
		errs = append(errs, fmt.Errorf("metadata.minHostVersion: %q is not a semantic version", m.MinHostVersion))
	}
	return errors.Join(errs...)
}

// Implements reports whether the module declares stage s.
func (m *Metadata) Implements(s abi.Stage) bool {
	for _, name := range m.Stages {
		if name == s.String() {
			return true
		}
	}
	return false
}

// Marshal returns the metadata section payload: compact JSON with a stable
// field order, so the same metadata always gives the same bytes.
func (m *Metadata) Marshal() ([]byte, error) {
	return json.Marshal(m)
}
