package main

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/localfile"
	"github.com/wasp-proxy/wasp/internal/modbuild"
	"github.com/wasp-proxy/wasp/internal/printable"
)

func newModuleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "module",
		Short: "Build, inspect and distribute policy modules",
	}
	cmd.AddCommand(newModuleBuildCommand(), newModuleInspectCommand(), newModulePushCommand(),
		newModulePullCommand(), newModuleSaveCommand(), newModuleLoadCommand(),
		newModuleSignCommand(), newModuleVerifyCommand(), newModuleTestCommand(), newModuleBenchCommand())
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

// registryFlags are the flags of the commands that talk to a registry.
type registryFlags struct {
	credentials []string
	plainHTTP   bool
	cacheDir    string
}

func (f *registryFlags) register(cmd *cobra.Command, cache bool) {
	cmd.Flags().StringArrayVar(&f.credentials, "registry-config", nil, "docker config file or Kubernetes pull secret with registry credentials (repeatable; docker's own configuration is read after these)")
	cmd.Flags().BoolVar(&f.plainHTTP, "plain-http", false, "talk HTTP, not HTTPS, to the registry (registries on loopback always get HTTP)")
	if cache {
		cmd.Flags().StringVar(&f.cacheDir, "cache-dir", "", `wasp's cache directory (as given to wasp run --cache-dir); "": none`)
	}
}

func (f *registryFlags) client(allowTags bool) (*oci.Client, error) {
	return oci.New(oci.Options{
		CacheDir:        chain.OCICacheDir(f.cacheDir),
		CredentialFiles: f.credentials,
		DockerConfig:    true,
		PlainHTTP:       f.plainHTTP,
		AllowTags:       allowTags,
	})
}

func newModuleInspectCommand() *cobra.Command {
	var (
		rf    registryFlags
		trust trustFlags
	)
	cmd := &cobra.Command{
		Use:   "inspect FILE|oci://REF",
		Short: "Print a module's ABI version, stages, metadata and digests",
		Long: `inspect loads a module as wasp run does (ABI marker, imports, metadata,
exports and their signatures, compilation, initialisation), refuses one
that would not load, and prints what it declares. SOURCE is a file,
builtin:NAME or oci://REGISTRY/REPOSITORY with @sha256:DIGEST or :TAG; for
a tag it prints the digest to pin the module by. With --key, or the keyless
flags of wasp module verify, it reports whether the module's signatures
verify and whose they are (wasp module verify fails when none does).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := inspection{Source: args[0], Signatures: "not checked"}
			var wasm []byte
			if strings.HasPrefix(args[0], oci.Scheme) {
				c, err := rf.client(true)
				if err != nil {
					return err
				}
				a, err := c.Pull(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				wasm = a.Wasm
				out.Reference, out.Tag, out.ManifestDigest, out.Annotations = a.Reference, a.Tag, a.ManifestDigest.String(), a.Annotations
				if out.SignaturesFound, err = c.FindSignatures(cmd.Context(), a.Reference); err != nil {
					// A module served from the cache, its registry down.
					out.SignaturesFound, out.SignaturesNotListed = nil, err.Error()
				}
				if trust.given() {
					p, err := trust.policy()
					if err != nil {
						return err
					}
					s, err := c.Verify(cmd.Context(), a.Reference, p)
					switch {
					case err != nil:
						out.Signatures = "not verified: " + err.Error()
					default:
						out.Signatures = "verified: " + describeSignatures(s)
					}
				}
			} else {
				var err error
				if wasm, err = chain.Read(args[0]); err != nil {
					return err
				}
			}
			meta, err := checkLoads(cmd.Context(), args[0], wasm)
			if err != nil {
				return err
			}
			out.Digest, out.Size, out.Metadata = runtime.Digest(wasm), len(wasm), meta
			out.escape()
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		},
	}
	rf.register(cmd, true)
	trust.register(cmd)
	return cmd
}

// inspection is what wasp module inspect prints.
type inspection struct {
	Source string `json:"source"`
	// Reference, Tag, ManifestDigest and Annotations are set for oci://
	// sources: the reference pinned by digest, the tag it was given by.
	Reference      string            `json:"reference,omitempty"`
	Tag            string            `json:"tag,omitempty"`
	ManifestDigest string            `json:"manifestDigest,omitempty"`
	Digest         string            `json:"digest"` // of the module binary
	Size           int               `json:"size"`
	Metadata       any               `json:"metadata"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	Signatures     string            `json:"signatures"`
	// SignaturesFound lists an oci:// module's signatures, unverified.
	SignaturesFound []oci.FoundSignature `json:"signaturesFound,omitempty"`
	// SignaturesNotListed says why they could not be listed.
	SignaturesNotListed string `json:"signaturesNotListed,omitempty"`
}

func newModulePushCommand() *cobra.Command {
	var rf registryFlags
	cmd := &cobra.Command{
		Use:   "push FILE oci://REGISTRY/REPOSITORY[:TAG]",
		Short: "Push a module to a registry as an OCI artifact",
		Long: `push loads the module as wasp run does (ABI marker, imports, metadata,
exports and their signatures, compilation, initialisation), refuses one
that would not load, and uploads it
as an OCI artifact in the CNCF Wasm layout, its metadata in the manifest
annotations. It prints the reference pinned by digest, the one to give
wasp run --module.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			wasm, err := chain.Read(args[0])
			if err != nil {
				return err
			}
			meta, err := checkLoads(cmd.Context(), args[0], wasm)
			if err != nil {
				return err
			}
			c, err := rf.client(false)
			if err != nil {
				return err
			}
			a, err := c.Push(cmd.Context(), args[1], wasm, meta)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), a.Reference)
			return nil
		},
	}
	rf.register(cmd, false)
	return cmd
}

// checkLoads loads wasm as wasp run does, under name, in a runtime of its
// own without a cache, and returns its metadata: runtime.Inspect's
// checks, then the export signatures, compilation, instantiation and
// initialisation, which a module that passes Inspect may still fail. A
// module that rejects having no configuration passed all of them, and is
// accepted: its configuration is the node's to give.
func checkLoads(ctx context.Context, name string, wasm []byte) (*metadata.Metadata, error) {
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		return nil, err
	}
	defer rt.Close(ctx)
	m, err := rt.Load(ctx, name, wasm, runtime.Limits{})
	switch {
	case errors.Is(err, runtime.ErrConfigRejected):
		return runtime.Inspect(wasm)
	case err != nil:
		return nil, err
	}
	defer m.Close()
	return m.Metadata, nil
}

// escape passes the text the module and its registry wrote through
// printable.String: JSON escapes control characters, not C1 controls or
// bidirectional overrides, which a terminal acts on.
func (in *inspection) escape() {
	if m, ok := in.Metadata.(*metadata.Metadata); ok && m != nil {
		c := *m
		c.Description = printable.String(c.Description)
		in.Metadata = &c
	}
	if len(in.Annotations) > 0 {
		a := make(map[string]string, len(in.Annotations))
		for k, v := range in.Annotations {
			a[printable.String(k)] = printable.String(v)
		}
		in.Annotations = a
	}
	in.Signatures = printable.String(in.Signatures)
	in.SignaturesNotListed = printable.String(in.SignaturesNotListed)
	found := make([]oci.FoundSignature, len(in.SignaturesFound))
	for i, f := range in.SignaturesFound {
		f.Signer, f.Problem = printable.String(f.Signer), printable.String(f.Problem) // unverified, the registry's
		found[i] = f
	}
	if in.SignaturesFound != nil {
		in.SignaturesFound = found
	}
}

func newModulePullCommand() *cobra.Command {
	var (
		rf       registryFlags
		out      string
		allowTag bool
	)
	cmd := &cobra.Command{
		Use:   "pull oci://REGISTRY/REPOSITORY@sha256:DIGEST -o FILE",
		Short: "Pull a module from a registry, checking its digests",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := rf.client(allowTag)
			if err != nil {
				return err
			}
			a, err := c.Pull(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if _, err := runtime.Inspect(a.Wasm); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if err := os.WriteFile(out, a.Wasm, 0o644); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), a.Reference)
			return nil
		},
	}
	rf.register(cmd, true)
	cmd.Flags().StringVarP(&out, "output", "o", "", "output file (required)")
	cmd.Flags().BoolVar(&allowTag, "allow-tag", false, "resolve a tag (the digest it resolved to is printed)")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

func newModuleSaveCommand() *cobra.Command {
	var (
		rf  registryFlags
		out string
	)
	cmd := &cobra.Command{
		Use:   "save oci://REF... -o ARCHIVE.tar",
		Short: "Save modules into an archive for clusters without registry access",
		Long: `save pulls modules, pinned by digest, and writes them as a tar archive of an
OCI image layout, for wasp module load on nodes that cannot reach the registry.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := rf.client(false)
			if err != nil {
				return err
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			saved, err := c.Save(cmd.Context(), args, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(out)
				return err
			}
			for _, a := range saved {
				fmt.Fprintln(cmd.OutOrStdout(), a.Reference)
			}
			return nil
		},
	}
	rf.register(cmd, false)
	cmd.Flags().StringVarP(&out, "output", "o", "", "archive file (required)")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

func newModuleLoadCommand() *cobra.Command {
	var cacheDir string
	cmd := &cobra.Command{
		Use:   "load ARCHIVE.tar",
		Short: "Load modules saved by wasp module save into wasp's cache on this node",
		Long: `load checks every module in an archive written by wasp module save against
its digests and puts it in wasp's cache, where wasp run finds the references
pinned by digest without asking their registry.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cacheDir == "" {
				return errors.New("--cache-dir: no cache directory to load into")
			}
			c, err := oci.New(oci.Options{CacheDir: chain.OCICacheDir(cacheDir)})
			if err != nil {
				return err
			}
			loaded, err := c.Load(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			for _, a := range loaded {
				fmt.Fprintln(cmd.OutOrStdout(), a.Reference)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cacheDir, "cache-dir", defaultCacheDir(), "wasp's cache directory, as given to wasp run --cache-dir")
	return cmd
}

func newModuleSignCommand() *cobra.Command {
	var (
		rf     registryFlags
		key    string
		format string
	)
	cmd := &cobra.Command{
		Use:   "sign oci://REGISTRY/REPOSITORY@sha256:DIGEST --key KEY.pem",
		Short: "Sign a module in a registry, as cosign does with a key",
		Long: `sign signs the module's manifest digest with a private key and stores the
signature beside it in one of cosign's layouts, where wasp module verify and
cosign verify --key find it: --format bundle (the default, as cosign 3) is a
Sigstore bundle attached to the module as a referrer; --format
simplesigning is the older layout, the manifest tagged sha256-HEX.sig in the
same repository. No transparency log is written to. KEY.pem is an
unencrypted PEM key (PKCS #8 or SEC 1 ECDSA, RSA or Ed25519); cosign's
password-encrypted keys are not read. A tag is resolved once and the digest
it resolved to is signed and printed. Keyless signing needs an OIDC identity
and Sigstore's services: use cosign.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := localfile.Read(key, localfile.MaxKeyFileSize)
			if err != nil {
				return err
			}
			signer, err := oci.ParsePrivateKey(data)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			c, err := rf.client(true)
			if err != nil {
				return err
			}
			switch format {
			case "bundle":
				m, err := c.SignBundle(cmd.Context(), args[0], signer)
				if err != nil {
					return err
				}
				s, err := c.Verify(cmd.Context(), args[0], oci.SignaturePolicy{PublicKeys: []crypto.PublicKey{signer.Public()}})
				if err != nil {
					return fmt.Errorf("the signature written does not verify: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "signed %s\nsignature bundle in referrer %s\n", s.Reference, m)
			case "simplesigning":
				s, err := c.Sign(cmd.Context(), args[0], signer)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "signed %s\nsignatures at %s (%d)\n", s.Reference, s.SignatureReference, s.Found)
			default:
				return fmt.Errorf("--format %q: want bundle or simplesigning", format)
			}
			return nil
		},
	}
	rf.register(cmd, false)
	cmd.Flags().StringVar(&format, "format", "bundle", "bundle (a Sigstore bundle attached as a referrer, as cosign 3) or simplesigning (the sha256-HEX.sig manifest)")
	cmd.Flags().StringVar(&key, "key", "", "PEM private key (required)")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

func newModuleVerifyCommand() *cobra.Command {
	var (
		rf    registryFlags
		trust trustFlags
	)
	cmd := &cobra.Command{
		Use:   "verify oci://REGISTRY/REPOSITORY@sha256:DIGEST (--key PUB.pem | --trusted-root ROOT.json --certificate-identity ID --certificate-oidc-issuer URL)",
		Short: "Verify a module's cosign signatures with public keys or keyless identities",
		Long: `verify succeeds when at least one of the module's signatures verifies with
one of the keys, or is a keyless signature of the identity given, and names
the module's manifest digest; it fails when there is no signature, or none
that verifies. Signatures are read in both of cosign's layouts: the
key-based one (the manifest tagged sha256-HEX.sig) and Sigstore bundles
attached as referrers (cosign 3's default, and the only one for keyless
signatures). A keyless signature is checked against the Sigstore trusted
root given (trusted_root.json: its Fulcio certificate authority, Rekor log
and, if listed, certificate transparency logs), offline. A tag is resolved
once and the digest it resolved to is verified and printed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !trust.given() {
				return errors.New("nothing to verify with: give --key, or --trusted-root with --certificate-identity and --certificate-oidc-issuer")
			}
			p, err := trust.policy()
			if err != nil {
				return err
			}
			c, err := rf.client(true)
			if err != nil {
				return err
			}
			s, err := c.Verify(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verified %s\n%s\n", s.Reference, describeSignatures(s))
			return nil
		},
	}
	rf.register(cmd, false)
	trust.register(cmd)
	return cmd
}

// describeSignatures says which signatures verified.
func describeSignatures(s *oci.Signatures) string {
	var parts []string
	if s.Found > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d signatures at %s verify", s.Verified, s.Found, s.SignatureReference))
	}
	if len(s.Signers) > 0 {
		parts = append(parts, fmt.Sprintf("%d signature bundles, signed by %s", s.Bundles, strings.Join(s.Signers, ", ")))
	}
	return strings.Join(parts, "; ")
}

// trustFlags are whose signatures wasp module verify and inspect trust,
// with cosign verify's flag names.
type trustFlags struct {
	keys                     []string
	trustedRoot              string
	identity, identityRegExp string
	issuer, issuerRegExp     string
}

func (t *trustFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringArrayVar(&t.keys, "key", nil, "PEM public key (repeatable: any one verifying is enough)")
	fs.StringVar(&t.trustedRoot, "trusted-root", "", "Sigstore trusted root (trusted_root.json) for keyless signatures")
	fs.StringVar(&t.identity, "certificate-identity", "", "keyless: the signer's identity (certificate SAN: an email or URI)")
	fs.StringVar(&t.identityRegExp, "certificate-identity-regexp", "", "keyless: a regular expression the signer's identity matches")
	fs.StringVar(&t.issuer, "certificate-oidc-issuer", "", "keyless: the signer's OIDC issuer")
	fs.StringVar(&t.issuerRegExp, "certificate-oidc-issuer-regexp", "", "keyless: a regular expression the signer's OIDC issuer matches")
}

func (t *trustFlags) given() bool {
	return len(t.keys) > 0 || t.trustedRoot != "" || t.identity != "" || t.identityRegExp != "" || t.issuer != "" || t.issuerRegExp != ""
}

// policy is the policy of the flags; keyless flags need --trusted-root.
func (t *trustFlags) policy() (oci.SignaturePolicy, error) {
	var (
		p   oci.SignaturePolicy
		err error
	)
	if p.PublicKeys, err = readPublicKeys(t.keys); err != nil {
		return p, err
	}
	if t.trustedRoot == "" && t.identity == "" && t.identityRegExp == "" && t.issuer == "" && t.issuerRegExp == "" {
		return p, nil
	}
	if t.trustedRoot == "" {
		return p, errors.New("--certificate-identity and --certificate-oidc-issuer need --trusted-root")
	}
	root, err := localfile.Read(t.trustedRoot, localfile.MaxKeyFileSize)
	if err != nil {
		return p, err
	}
	p.Keyless, err = oci.NewKeylessPolicy(root, []oci.Identity{{Issuer: t.issuer, IssuerRegExp: t.issuerRegExp, Subject: t.identity, SubjectRegExp: t.identityRegExp}})
	if err != nil {
		return p, fmt.Errorf("--trusted-root %s: %w", t.trustedRoot, err)
	}
	return p, nil
}

// readPublicKeys reads the PEM public keys of files.
func readPublicKeys(files []string) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for _, f := range files {
		data, err := localfile.Read(f, localfile.MaxKeyFileSize)
		if err != nil {
			return nil, err
		}
		k, err := oci.ParsePublicKeys(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		keys = append(keys, k...)
	}
	return keys, nil
}
