package oci_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/internal/ocitest"
)

// module returns a builtin module and its metadata.
func module(t *testing.T) ([]byte, *metadata.Metadata) { return ocitest.Module(t) }

func newClient(t *testing.T, opts oci.Options) *oci.Client {
	t.Helper()
	c, err := oci.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// push pushes the selection module to oci://HOST/wasp/selection:v1.
func push(t *testing.T, reg *ocitest.Registry) *oci.Artifact {
	t.Helper()
	wasm, meta := module(t)
	a, err := newClient(t, oci.Options{}).Push(context.Background(), "oci://"+reg.Host+"/wasp/selection:v1", wasm, meta)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestParseReference(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		in      string
		want    oci.Reference
		wantErr string
	}{
		{"oci://r.example/wasp/m@" + d, oci.Reference{Registry: "r.example", Repository: "wasp/m", Digest: d}, ""},
		{"oci://127.0.0.1:5000/m:v1", oci.Reference{Registry: "127.0.0.1:5000", Repository: "m", Tag: "v1"}, ""},
		{"oci://r.example/m:v1@" + d, oci.Reference{Registry: "r.example", Repository: "m", Tag: "v1", Digest: d}, ""},
		{"oci://r.example/m", oci.Reference{Registry: "r.example", Repository: "m"}, ""},
		{"r.example/m@" + d, oci.Reference{}, "want oci://"},
		{"oci://r.example/m@sha256:00", oci.Reference{}, "invalid"},
		{"oci://r.example/M", oci.Reference{}, "invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := oci.ParseReference(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			if got.String() != tc.in {
				t.Fatalf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

func TestPushPull(t *testing.T) {
	reg := ocitest.New(t)
	wasm, meta := module(t)
	pushed := push(t, reg)
	if pushed.WasmDigest != digest.FromBytes(wasm) || !strings.HasSuffix(pushed.Reference, "@"+pushed.ManifestDigest.String()) {
		t.Fatalf("pushed %+v", pushed)
	}

	// The artifact in the registry follows the CNCF Wasm layout.
	var m ocispec.Manifest
	if err := json.Unmarshal(reg.Get(pushed.ManifestDigest), &m); err != nil {
		t.Fatal(err)
	}
	if m.MediaType != ocispec.MediaTypeImageManifest || m.Config.MediaType != oci.ConfigMediaType ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != oci.LayerMediaType || m.Layers[0].Digest != pushed.WasmDigest {
		t.Fatalf("manifest %+v", m)
	}
	var cfg struct {
		Architecture, OS string
		LayerDigests     []digest.Digest
	}
	if err := json.Unmarshal(reg.Get(m.Config.Digest), &cfg); err != nil || cfg.Architecture != "wasm" || cfg.OS != "wasip1" || len(cfg.LayerDigests) != 1 || cfg.LayerDigests[0] != pushed.WasmDigest {
		t.Fatalf("config %+v, %v", cfg, err)
	}
	want := map[string]string{
		oci.AnnotationTitle:   meta.Name,
		oci.AnnotationVersion: meta.Version,
		oci.AnnotationABI:     "1",
		oci.AnnotationStages:  "endpoint-selection",
	}
	for k, v := range want {
		if m.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, m.Annotations[k], v)
		}
	}
	if got, err := metadata.Parse([]byte(m.Annotations[oci.AnnotationMetadata])); err != nil || got.Name != meta.Name {
		t.Errorf("annotation %s: %+v, %v", oci.AnnotationMetadata, got, err)
	}

	a, err := newClient(t, oci.Options{}).Pull(context.Background(), pushed.Reference)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Wasm, wasm) || a.ManifestDigest != pushed.ManifestDigest || a.WasmDigest != pushed.WasmDigest || a.Tag != "" || a.Cached {
		t.Fatalf("pulled %+v", a)
	}
	if a.Annotations[oci.AnnotationTitle] != meta.Name {
		t.Fatalf("pulled annotations %v", a.Annotations)
	}

	// The same module gives the same manifest: a digest can be computed
	// ahead and pushed again.
	if again := push(t, reg); again.ManifestDigest != pushed.ManifestDigest {
		t.Fatalf("second push: %s, want %s", again.ManifestDigest, pushed.ManifestDigest)
	}
}

func TestPushRefusesInvalidMetadata(t *testing.T) {
	reg := ocitest.New(t)
	wasm, meta := module(t)
	bad := *meta
	bad.Stages = nil
	_, err := newClient(t, oci.Options{}).Push(context.Background(), "oci://"+reg.Host+"/m:v1", wasm, &bad)
	if err == nil || !strings.Contains(err.Error(), "metadata.stages") {
		t.Fatalf("got %v, want a metadata.stages error", err)
	}
	if reg.Requests() != 0 {
		t.Fatalf("the registry got %d requests", reg.Requests())
	}
}

func TestTags(t *testing.T) {
	reg := ocitest.New(t)
	pushed := push(t, reg)
	ref := "oci://" + reg.Host + "/wasp/selection:v1"

	before := reg.Requests()
	_, err := newClient(t, oci.Options{}).Pull(context.Background(), ref)
	if !errors.Is(err, oci.ErrNotPinned) || !strings.Contains(err.Error(), ref) {
		t.Fatalf("got %v, want ErrNotPinned naming %s", err, ref)
	}
	if reg.Requests() != before {
		t.Fatalf("a refused tag was resolved: %d requests", reg.Requests()-before)
	}

	a, err := newClient(t, oci.Options{AllowTags: true}).Pull(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if a.Tag != "v1" || a.ManifestDigest != pushed.ManifestDigest || a.Reference != pushed.Reference {
		t.Fatalf("resolved %+v, want %s", a, pushed.Reference)
	}
}

func TestVerification(t *testing.T) {
	tests := []struct {
		name    string
		break_  func(reg *ocitest.Registry, a *oci.Artifact)
		opts    oci.Options
		wantErr error
		want    string
	}{
		{"wrong layer", func(reg *ocitest.Registry, a *oci.Artifact) {
			data := bytes.Clone(reg.Get(a.WasmDigest))
			data[len(data)/2] ^= 0xff
			reg.Serve(a.WasmDigest, data)
		}, oci.Options{}, oci.ErrDigestMismatch, "module layer"},
		{"wrong manifest", func(reg *ocitest.Registry, a *oci.Artifact) {
			data := bytes.Replace(reg.Get(a.ManifestDigest), []byte(`"schemaVersion":2`), []byte(`"schemaVersion":3`), 1)
			reg.Serve(a.ManifestDigest, data)
		}, oci.Options{}, oci.ErrDigestMismatch, "manifest"},
		{"missing layer", func(reg *ocitest.Registry, a *oci.Artifact) { reg.Delete(a.WasmDigest) },
			oci.Options{}, oci.ErrNotFound, "module layer"},
		{"too large", func(*ocitest.Registry, *oci.Artifact) {}, oci.Options{MaxModuleSize: 1024}, oci.ErrTooLarge, "module layer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := ocitest.New(t)
			a := push(t, reg)
			tc.break_(reg, a)
			tc.opts.CacheDir = t.TempDir()
			_, err := newClient(t, tc.opts).Pull(context.Background(), a.Reference)
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), a.Reference) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %v naming %s and %q", err, tc.wantErr, a.Reference, tc.want)
			}
			// Nothing unverified is cached.
			if entries, _ := filepath.Glob(filepath.Join(tc.opts.CacheDir, "blobs", "sha256", "*")); len(entries) > 2 {
				t.Fatalf("cached %v", entries)
			}
		})
	}
}

func TestLayerMediaTypes(t *testing.T) {
	wasm, _ := module(t)
	tests := []struct {
		layerType string
		wantErr   error
	}{
		{oci.LayerMediaType, nil},
		{"application/vnd.wasm.content.layer.v1+wasm", nil},
		{"application/vnd.module.wasm.content.layer.v1+wasm", nil},
		{"application/vnd.oci.image.layer.v1.tar+gzip", oci.ErrNotWasm},
	}
	for _, tc := range tests {
		t.Run(tc.layerType, func(t *testing.T) {
			reg := ocitest.New(t)
			cfg := []byte("{}")
			layer := ocispec.Descriptor{MediaType: tc.layerType, Digest: reg.Put("", wasm), Size: int64(len(wasm))}
			m, err := json.Marshal(ocispec.Manifest{
				Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
				Config: ocispec.Descriptor{MediaType: "application/vnd.wasm.config.v1+json", Digest: reg.Put("", cfg), Size: int64(len(cfg))},
				Layers: []ocispec.Descriptor{layer},
			})
			if err != nil {
				t.Fatal(err)
			}
			ref := "oci://" + reg.Host + "/m@" + reg.Put(ocispec.MediaTypeImageManifest, m).String()
			a, err := newClient(t, oci.Options{}).Pull(context.Background(), ref)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if err == nil && !bytes.Equal(a.Wasm, wasm) {
				t.Fatal("pulled other bytes")
			}
		})
	}
}

func TestCache(t *testing.T) {
	reg := ocitest.New(t)
	pushed := push(t, reg)
	dir := t.TempDir()

	first, err := newClient(t, oci.Options{CacheDir: dir}).Pull(context.Background(), pushed.Reference)
	if err != nil || first.Cached {
		t.Fatalf("first pull: %+v, %v", first, err)
	}
	// Another process on the node (a restart) pulls nothing.
	before := reg.Requests()
	again, err := newClient(t, oci.Options{CacheDir: dir}).Pull(context.Background(), pushed.Reference)
	if err != nil || !again.Cached || !bytes.Equal(again.Wasm, first.Wasm) || reg.Requests() != before {
		t.Fatalf("second pull: cached %v, %v, %d requests", again != nil && again.Cached, err, reg.Requests()-before)
	}

	// A corrupted blob is fetched again, not served.
	blob := filepath.Join(dir, "blobs", "sha256", pushed.WasmDigest.Encoded())
	if err := os.WriteFile(blob, []byte("corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	healed, err := newClient(t, oci.Options{CacheDir: dir}).Pull(context.Background(), pushed.Reference)
	if err != nil || healed.Cached || !bytes.Equal(healed.Wasm, first.Wasm) {
		t.Fatalf("pull over a corrupt cache: %v", err)
	}

	// With the registry down, the pinned reference is served from the cache.
	reg.Close()
	down, err := newClient(t, oci.Options{CacheDir: dir}).Pull(context.Background(), pushed.Reference)
	if err != nil || !down.Cached {
		t.Fatalf("pull with the registry down: %v", err)
	}
	// Not so for a tag, which only the registry can resolve.
	_, err = newClient(t, oci.Options{CacheDir: dir, AllowTags: true}).Pull(context.Background(), "oci://"+reg.Host+"/wasp/selection:v1")
	if err == nil || !strings.Contains(err.Error(), "resolve tag v1") {
		t.Fatalf("tag with the registry down: %v", err)
	}
}

func TestCredentials(t *testing.T) {
	reg := ocitest.New(t)
	wasm, meta := module(t)
	reg.RequireBasicAuth("ci", "s3cret")
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("ci:s3cret"))
	dockerConfig := `{"auths": {"` + reg.Host + `": {"auth": "` + auth + `"}}}`
	files := map[string]string{
		"config.json":       dockerConfig,
		".dockerconfigjson": dockerConfig,
		"secret.yaml": "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: " +
			base64.StdEncoding.EncodeToString([]byte(dockerConfig)) + "\n",
		"wrong.json": `{"auths": {"` + reg.Host + `": {"username": "ci", "password": "guess"}}}`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ref := "oci://" + reg.Host + "/wasp/selection:v1"

	for _, name := range []string{"config.json", ".dockerconfigjson", "secret.yaml"} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, oci.Options{CredentialFiles: []string{filepath.Join(dir, name)}})
			a, err := c.Push(context.Background(), ref, wasm, meta)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Pull(context.Background(), a.Reference); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, name := range []string{"", "wrong.json"} {
		t.Run("refused "+name, func(t *testing.T) {
			var opts oci.Options
			if name != "" {
				opts.CredentialFiles = []string{filepath.Join(dir, name)}
			}
			_, err := newClient(t, opts).Push(context.Background(), ref, wasm, meta)
			if !errors.Is(err, oci.ErrUnauthorized) || !strings.Contains(err.Error(), ref) {
				t.Fatalf("got %v, want ErrUnauthorized naming %s", err, ref)
			}
		})
	}
	if _, err := oci.New(oci.Options{CredentialFiles: []string{filepath.Join(dir, "missing.json")}}); err == nil {
		t.Fatal("a missing credential file was accepted")
	}
}

func TestSaveLoad(t *testing.T) {
	reg := ocitest.New(t)
	pushed := push(t, reg)
	var archive bytes.Buffer
	saved, err := newClient(t, oci.Options{}).Save(context.Background(), []string{pushed.Reference}, &archive)
	if err != nil || len(saved) != 1 {
		t.Fatalf("save: %v", err)
	}
	path := filepath.Join(t.TempDir(), "modules.tar")
	if err := os.WriteFile(path, archive.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	reg.Close()

	// An air-gapped node: load the archive, then pull by digest.
	dir := t.TempDir()
	loaded, err := newClient(t, oci.Options{CacheDir: dir}).Load(context.Background(), path)
	if err != nil || len(loaded) != 1 || loaded[0].Reference != pushed.Reference {
		t.Fatalf("load: %v, %v", loaded, err)
	}
	a, err := newClient(t, oci.Options{CacheDir: dir}).Pull(context.Background(), pushed.Reference)
	if err != nil || !a.Cached || a.WasmDigest != pushed.WasmDigest {
		t.Fatalf("pull after load: %v", err)
	}
}
