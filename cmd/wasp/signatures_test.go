package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/wasp-proxy/wasp/internal/sigstoretest"
)

// TestRunModuleSignatureFlags: the node-wide signature flags become
// moduleSignatures, which every oci:// module's spec requires before its
// own; --config makes them ignored with a warning naming the field, and a
// bad value is an error naming the flag.
func TestRunModuleSignatureFlags(t *testing.T) {
	dir := t.TempDir()
	_, pub := writeKeyPair(t, dir, "node")
	root := filepath.Join(dir, "trusted_root.json")
	if err := os.WriteFile(root, sigstoretest.New(t).TrustedRoot(t), 0o644); err != nil {
		t.Fatal(err)
	}
	oci := "endpoint-selection=oci://registry.example/m@sha256:" + strings.Repeat("a", 64)
	parse := func(t *testing.T, args ...string) (*runConfig, []string, error) {
		t.Helper()
		var (
			f        runFlags
			warnings []string
		)
		cmd := &cobra.Command{}
		f.add(cmd)
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.waspConfig(cmd.Flags(), func(s string) { warnings = append(warnings, s) })
		if err != nil {
			return nil, warnings, err
		}
		rc, err := newRunConfig(cfg, &f, func() (string, error) { return "node-a", nil })
		return rc, warnings, err
	}

	rc, _, err := parse(t, "--module", oci, "--module", "topology=builtin:topology", "--module-public-key", pub,
		"--module-trusted-root", root, "--module-certificate-identity", "release@example.com", "--module-certificate-oidc-issuer", "https://issuer.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(rc.moduleSignatures) != 1 || len(rc.moduleSignatures[0].PublicKeys) != 1 || rc.moduleSignatures[0].Keyless == nil {
		t.Fatalf("moduleSignatures %+v: want one policy with a key and a keyless identity", rc.moduleSignatures)
	}
	for _, s := range rc.specs {
		want := 0
		if strings.HasPrefix(s.Source, "oci://") {
			want = 1
		}
		if len(s.Signatures) != want {
			t.Errorf("%s: %d signature policies, want %d", s.Source, len(s.Signatures), want)
		}
	}

	_, _, err = parse(t, "--module", oci, "--module-certificate-identity", "release@example.com")
	if err == nil || !strings.Contains(err.Error(), "--module-trusted-root: moduleSignatures.keyless.trustedRoot: Required value") {
		t.Fatalf("keyless without a trusted root: %v", err)
	}
	_, _, err = parse(t, "--module", oci, "--module-public-key", filepath.Join(dir, "gone.pem"))
	if err == nil || !strings.Contains(err.Error(), "moduleSignatures.publicKeys[0]") {
		t.Fatalf("a missing key file: %v", err)
	}

	cfg := filepath.Join(dir, "wasp.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: wasp.dev/v1alpha1\nkind: WaspConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, warnings, err := parse(t, "--config", cfg, "--module-public-key", pub)
	if err != nil || len(rc.moduleSignatures) != 0 {
		t.Fatalf("--config with --module-public-key: %+v, %v", rc, err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "--module-public-key is ignored") || !strings.Contains(warnings[0], "moduleSignatures.publicKeys") {
		t.Fatalf("warnings %q", warnings)
	}
}
