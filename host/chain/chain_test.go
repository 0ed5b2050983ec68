package chain_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/localfile"
	"github.com/wasp-proxy/wasp/internal/ocitest"
	"github.com/wasp-proxy/wasp/modules"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in      string
		stage   abi.Stage
		source  string
		wantErr string
	}{
		{"topology=builtin:topology", abi.StageTopology, "builtin:topology", ""},
		{"endpoint-selection=./m.wasm", abi.StageEndpointSelection, "./m.wasm", ""},
		{"traffic-policy=file:///a=b.wasm", abi.StageTrafficPolicy, "file:///a=b.wasm", ""},
		{"topology", 0, "", "want STAGE=SOURCE"},
		{"topology=", 0, "", "want STAGE=SOURCE"},
		{"routing=x.wasm", 0, "", `unknown stage "routing"`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			s, err := chain.ParseSpec(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || s.Stage != tc.stage || s.Source != tc.source {
				t.Fatalf("got %+v, %v", s, err)
			}
		})
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(path, []byte("bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{path, "file://" + path} {
		if b, err := chain.Read(src); err != nil || string(b) != "bytes" {
			t.Errorf("%s: %q, %v", src, b, err)
		}
	}
	want, _ := modules.Wasm("topology")
	if b, err := chain.Read("builtin:topology"); err != nil || len(b) != len(want) {
		t.Errorf("builtin:topology: %d bytes, %v", len(b), err)
	}
	for src, msg := range map[string]string{
		"builtin:nope":               `no builtin module "nope"`,
		"oci://r/m@sha256:00":        `invalid`,
		"oci://r/m:v1":               `not pinned by digest`,
		"https://r/m.wasm":           `scheme "https" is not supported`,
		filepath.Join(dir, "absent"): "no such file",
	} {
		if _, err := chain.Read(src); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: got %v, want %q", src, err, msg)
		}
	}
}

// TestLoadWrongStage: a module assigned to a stage it does not implement is
// refused with both names in the error.
func TestLoadWrongStage(t *testing.T) {
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	_, err = chain.Load(context.Background(), rt, []chain.Spec{{Stage: abi.StageTopology, Source: "builtin:selection"}})
	if err == nil || !strings.Contains(err.Error(), "stage topology") || !strings.Contains(err.Error(), "endpoint-selection") {
		t.Fatalf("got %v", err)
	}
	c, err := chain.Load(context.Background(), rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, s := range abi.Stages {
		if c.Modules[s] == nil || !c.Modules[s].Metadata.Implements(s) || !strings.HasPrefix(c.Sources[s], "builtin:") {
			t.Errorf("stage %s: %v from %q", s, c.Modules[s], c.Sources[s])
		}
	}
}

// pushSelection pushes the builtin selection module to reg as
// wasp/selection:v1, with a client of no options.
func pushSelection(t *testing.T, reg *ocitest.Registry) (*oci.Client, *oci.Artifact, []byte) {
	t.Helper()
	wasm, meta := ocitest.Module(t)
	c, err := oci.New(oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Push(context.Background(), "oci://"+reg.Host+"/wasp/selection:v1", wasm, meta)
	if err != nil {
		t.Fatal(err)
	}
	return c, a, wasm
}

// TestLoadOCI: an oci:// source pinned by digest is pulled into the cache
// beside the runtime's, and loads from there once its registry is down.
func TestLoadOCI(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of the machine's
	reg := ocitest.New(t)
	_, a, wasm := pushSelection(t, reg)
	cacheDir := t.TempDir()
	load := func(t *testing.T, source string) (*chain.Chain, error) {
		t.Helper()
		rt, err := runtime.New(runtime.Config{CacheDir: cacheDir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close(context.Background()) })
		return chain.Load(context.Background(), rt, []chain.Spec{{Stage: abi.StageEndpointSelection, Source: source}})
	}

	ch, err := load(t, a.Reference)
	if err != nil {
		t.Fatal(err)
	}
	ch.Close()
	if ch.Sources[abi.StageEndpointSelection] != a.Reference || ch.Modules[abi.StageEndpointSelection].Digest != runtime.Digest(wasm) {
		t.Fatalf("loaded %s (%s)", ch.Sources[abi.StageEndpointSelection], ch.Modules[abi.StageEndpointSelection].Digest)
	}
	if _, err := os.Stat(filepath.Join(chain.OCICacheDir(cacheDir), "blobs", "sha256", a.WasmDigest.Encoded())); err != nil {
		t.Fatalf("the module is not cached: %v", err)
	}

	reg.Close()
	ch, err = load(t, a.Reference)
	if err != nil {
		t.Fatalf("with the registry down: %v", err)
	}
	ch.Close()

	_, err = load(t, "oci://"+reg.Host+"/wasp/selection:v1")
	if !errors.Is(err, oci.ErrNotPinned) {
		t.Fatalf("a tag: got %v, want ErrNotPinned", err)
	}
}

// TestLoadOCISigned: a spec with public keys loads its oci:// module only
// once it is signed by one of them, and fails closed before.
func TestLoadOCISigned(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	reg := ocitest.New(t)
	c, a, _ := pushSelection(t, reg)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	spec := []chain.Spec{{Stage: abi.StageEndpointSelection, Source: a.Reference, Signatures: []oci.SignaturePolicy{{PublicKeys: []crypto.PublicKey{key.Public()}}}}}

	if _, err := chain.Load(context.Background(), rt, spec); !errors.Is(err, oci.ErrNoSignature) {
		t.Fatalf("unsigned: %v, want ErrNoSignature", err)
	}
	if _, err := c.Sign(context.Background(), a.Reference, key); err != nil {
		t.Fatal(err)
	}
	ch, err := chain.Load(context.Background(), rt, spec)
	if err != nil {
		t.Fatalf("signed: %v", err)
	}
	ch.Close()
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	spec[0].Signatures = []oci.SignaturePolicy{{PublicKeys: []crypto.PublicKey{other.Public()}}}
	if _, err := chain.Load(context.Background(), rt, spec); !errors.Is(err, oci.ErrBadSignature) {
		t.Fatalf("signed by another key: %v, want ErrBadSignature", err)
	}
}

// TestReadBounded: a module file is a regular file of at most
// abi.MaxModuleSize bytes; an endless device is refused without a read.
func TestReadBounded(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.wasm")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(abi.MaxModuleSize + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	tests := []struct {
		source string
		want   error
	}{
		{"file:///dev/zero", localfile.ErrNotRegular},
		{"/dev/zero", localfile.ErrNotRegular},
		{"file://" + big, localfile.ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.source, func(t *testing.T) {
			b, err := chain.Read(tc.source)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %d bytes, %v; want %v", len(b), err, tc.want)
			}
		})
	}
}

// TestLoadUnsignedFile: a node that requires signatures loads no module
// file, which cannot carry one; builtin modules, part of wasp, still load.
func TestLoadUnsignedFile(t *testing.T) {
	wasm, err := modules.Wasm("selection")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "selection.wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	policy := []oci.SignaturePolicy{{PublicKeys: []crypto.PublicKey{key.Public()}}}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	for _, source := range []string{"file://" + path, path} {
		_, err := chain.Load(context.Background(), rt, []chain.Spec{{Stage: abi.StageEndpointSelection, Source: source, Signatures: policy}})
		if !errors.Is(err, chain.ErrUnsignedFile) || !errors.Is(err, oci.ErrNoSignature) || chain.LoadResultOf(err) != chain.LoadSignature {
			t.Errorf("%s: got %v, want ErrUnsignedFile", source, err)
		}
	}
	c, err := chain.Load(context.Background(), rt, []chain.Spec{{Stage: abi.StageEndpointSelection, Source: "builtin:selection", Signatures: policy}})
	if err != nil {
		t.Fatalf("builtin module: %v", err)
	}
	c.Close()
}

// TestLoadEchoesNoContent: a file that is not a module is refused without
// a byte of it in the error, which reaches status and Events.
func TestLoadEchoesNoContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, []byte("root:x:0:0:root:/root:/bin/bash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	_, err = chain.Load(context.Background(), rt, []chain.Spec{{Stage: abi.StageEndpointSelection, Source: "file://" + path}})
	if !errors.Is(err, runtime.ErrInvalidModule) || !strings.Contains(err.Error(), "not a WebAssembly module") {
		t.Fatalf("got %v, want ErrInvalidModule saying it is not a module", err)
	}
	for _, leak := range []string{"726f6f74", "root", "0x72", "bash"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("the error %q holds %q, from the file", err, leak)
		}
	}
}
