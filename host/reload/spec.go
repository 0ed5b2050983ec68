package reload

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/localfile"
)

// ModuleSpec is the chain.Spec of a validated, defaulted module of the
// configuration. Every module but a builtin one must satisfy the node-wide
// signature policies global and its own signatures section, whose keys and
// trusted root are read now, inline or from any file.
func ModuleSpec(m v1alpha1.ModuleConfiguration, global ...oci.SignaturePolicy) (chain.Spec, error) {
	return newModuleSpec(m, readKeyFile, global)
}

// catalogSpec is the chain.Spec of a valid ServiceProxyModule's module.
// Whoever may write ServiceProxyModules may name files only under the
// directories the node's configuration allows (moduleFileDirectories): a
// file:// source, a key or a trusted root anywhere else is refused, as is
// any file when none is allowed; keys and trusted roots may always be
// inline.
func catalogSpec(m v1alpha1.ModuleConfiguration, dirs []string, global ...oci.SignaturePolicy) (chain.Spec, error) {
	if chain.IsFile(m.Source) {
		if _, err := localfile.Within(strings.TrimPrefix(m.Source, "file://"), dirs); err != nil {
			return chain.Spec{}, fmt.Errorf("source: %w (moduleFileDirectories)", err)
		}
	}
	return newModuleSpec(m, func(path string) ([]byte, error) {
		real, err := localfile.Within(path, dirs)
		if err != nil {
			return nil, fmt.Errorf("%w (moduleFileDirectories)", err)
		}
		return readKeyFile(real)
	}, global)
}

// newModuleSpec is ModuleSpec, reading key and trusted root files with
// readFile.
func newModuleSpec(m v1alpha1.ModuleConfiguration, readFile func(string) ([]byte, error), global []oci.SignaturePolicy) (chain.Spec, error) {
	stage, _ := abi.ParseStage(m.Stage)
	spec := chain.Spec{Stage: stage, Source: m.Source, Config: m.Config, Limits: runtime.Limits{
		MemoryBytes: uint64(m.Limits.Memory.Value()),
		Timeout:     m.Limits.Timeout.Duration,
		Instances:   int(m.Limits.Instances),
	}}
	if m.FailurePolicy == v1alpha1.Builtin {
		spec.FailurePolicy = pipeline.Builtin
	}
	if g := m.Guardrails; g != nil {
		spec.Guardrails = pipeline.Guardrails{AllowNotServing: g.AllowNotServing, AllowRemoteInLocal: g.AllowRemoteInLocal}
	}
	builtin := strings.HasPrefix(m.Source, "builtin:") // part of wasp
	if !builtin {
		spec.Signatures = append(spec.Signatures, global...)
	}
	if m.Signatures == nil {
		return spec, nil
	}
	p, err := readSignaturePolicy(m.Signatures, readFile)
	if err != nil {
		return spec, fmt.Errorf("signatures.%w", err)
	}
	if !builtin {
		spec.Signatures = append(spec.Signatures, p)
	}
	return spec, nil
}

// readKeyFile reads a public key or trusted root file: a regular file of
// at most localfile.MaxKeyFileSize bytes.
func readKeyFile(path string) ([]byte, error) {
	return localfile.Read(path, localfile.MaxKeyFileSize)
}

// SignaturePolicy reads a validated signatures section of the
// configuration: its public keys and trusted root, each inline or the
// path of any file. Errors name the field under the section.
func SignaturePolicy(sig *v1alpha1.ModuleSignatures) (oci.SignaturePolicy, error) {
	return readSignaturePolicy(sig, readKeyFile)
}

// readSignaturePolicy is SignaturePolicy, reading files with readFile. An
// error about a file's content names the file and what was wanted, never
// the content: the path may name any file on the node.
func readSignaturePolicy(sig *v1alpha1.ModuleSignatures, readFile func(string) ([]byte, error)) (oci.SignaturePolicy, error) {
	var p oci.SignaturePolicy
	for i, k := range sig.PublicKeys {
		pem, path, err := inlineOrFile(k, "-----BEGIN", readFile)
		if err != nil {
			return p, fmt.Errorf("publicKeys[%d]: %w", i, err)
		}
		keys, err := oci.ParsePublicKeys(pem)
		switch {
		case err != nil && path != "":
			return p, fmt.Errorf("publicKeys[%d]: %s: no usable PEM PUBLIC KEY block (ECDSA, RSA or Ed25519; the file's content is not shown)", i, path)
		case err != nil:
			return p, fmt.Errorf("publicKeys[%d]: %w", i, err)
		}
		p.PublicKeys = append(p.PublicKeys, keys...)
	}
	if kl := sig.Keyless; kl != nil {
		root, path, err := inlineOrFile(kl.TrustedRoot, "{", readFile)
		if err != nil {
			return p, fmt.Errorf("keyless.trustedRoot: %w", err)
		}
		ids := make([]oci.Identity, len(kl.Identities))
		for i, id := range kl.Identities {
			ids[i] = oci.Identity{Issuer: id.Issuer, IssuerRegExp: id.IssuerRegExp, Subject: id.Subject, SubjectRegExp: id.SubjectRegExp}
		}
		p.Keyless, err = oci.NewKeylessPolicy(root, ids)
		switch {
		case err != nil && path != "" && errors.Is(err, oci.ErrTrustedRoot):
			return p, fmt.Errorf("keyless.trustedRoot: %s: %w: not a usable Sigstore trusted_root.json (the file's content is not shown)", path, oci.ErrTrustedRoot)
		case err != nil:
			return p, fmt.Errorf("keyless: %w", err)
		}
	}
	return p, nil
}

// inlineOrFile returns v itself when it holds marker (inline content),
// else the content of the file at path v, read with readFile, and the
// path.
func inlineOrFile(v, marker string, readFile func(string) ([]byte, error)) (data []byte, path string, err error) {
	if strings.Contains(v, marker) {
		return []byte(v), "", nil
	}
	path = strings.TrimSpace(v)
	data, err = readFile(path)
	return data, path, err
}
