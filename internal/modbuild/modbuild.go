// Package modbuild builds a Go policy module directory into an annotated
// .wasm file: the standard toolchain's wasip1 reactor build, made
// reproducible, with the module's module.json embedded as its metadata
// section. `make modules` and `wasp module build` use it, and so do the
// tests that need real guests.
package modbuild

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// MetadataFile is the file in a module directory that holds its metadata.
const MetadataFile = "module.json"

// ReadMetadata reads and validates dir/module.json.
func ReadMetadata(dir string) (*metadata.Metadata, error) {
	path := filepath.Join(dir, MetadataFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m metadata.Metadata
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &m, nil
}

// Build compiles the Go main package in dir for GOOS=wasip1 GOARCH=wasm as
// a reactor, embeds dir/module.json, and returns the module bytes. The
// build is reproducible: -trimpath, no VCS stamping, no build ID.
func Build(ctx context.Context, dir string) ([]byte, error) {
	meta, err := ReadMetadata(dir)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "wasp-modbuild-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "module.wasm")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=",
		"-buildmode=c-shared", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", dir, err, msg)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	return runtime.Annotate(wasm, meta)
}

// TB is the part of testing.TB that File uses (so that this package does
// not link the testing package into wasp).
type TB interface {
	Helper()
	Fatal(args ...any)
	TempDir() string
}

// File builds the module directory dir, writes it to a temporary
// directory of tb as BASE.wasm (BASE: dir's last element) and returns its
// path; a failure fails tb.
func File(tb TB, dir string) string {
	tb.Helper()
	wasm, err := Build(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), filepath.Base(abs)+".wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}
