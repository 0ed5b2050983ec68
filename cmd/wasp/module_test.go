package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/ocitest"
	"github.com/wasp-proxy/wasp/modules"
)

// selectionFile writes the builtin selection module to DIR/selection.wasm
// and returns the file and the module.
func selectionFile(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	wasm, err := modules.Wasm("selection")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "selection.wasm")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	return file, wasm
}

// TestModuleRegistry: push, inspect, pull, save and load against a
// registry, the way an operator moves a module to the nodes.
func TestModuleRegistry(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials of the machine's
	reg := ocitest.New(t)
	dir := t.TempDir()
	file, wasm := selectionFile(t, dir)
	tagged := "oci://" + reg.Host + "/wasp/selection:v1"

	out, _, err := run(t, "", "module", "push", file, tagged)
	if err != nil {
		t.Fatal(err)
	}
	pinned := strings.TrimSpace(out)
	if !strings.HasPrefix(pinned, "oci://"+reg.Host+"/wasp/selection@sha256:") {
		t.Fatalf("push printed %q, want the reference by digest", out)
	}

	t.Run("push refuses a module without metadata", func(t *testing.T) {
		bare := filepath.Join(dir, "bare.wasm")
		if err := os.WriteFile(bare, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := run(t, "", "module", "push", bare, "oci://"+reg.Host+"/wasp/bare:v1")
		if err == nil || !strings.Contains(err.Error(), "bare.wasm") {
			t.Fatalf("got %v, want an error naming bare.wasm", err)
		}
	})

	t.Run("inspect a tag", func(t *testing.T) {
		out, _, err := run(t, "", "module", "inspect", tagged)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Reference, Tag, ManifestDigest, Digest, Signatures string
			Metadata                                           struct {
				ABI    int
				Stages []string
			}
			Annotations map[string]string
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		if got.Reference != pinned || got.Tag != "v1" || !strings.HasSuffix(pinned, got.ManifestDigest) ||
			got.Digest != runtime.Digest(wasm) || got.Signatures != "not checked" || got.Metadata.ABI != 1 ||
			len(got.Metadata.Stages) != 1 || got.Annotations["dev.wasp.module.stages"] != "endpoint-selection" {
			t.Fatalf("inspect printed %s", out)
		}
	})

	t.Run("pull", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "m.wasm")
		if _, _, err := run(t, "", "module", "pull", pinned, "-o", dst); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, wasm) {
			t.Fatalf("pulled %d bytes, %v", len(got), err)
		}
		_, _, err := run(t, "", "module", "pull", tagged, "-o", dst)
		if err == nil || !strings.Contains(err.Error(), "not pinned by digest") {
			t.Fatalf("pull of a tag: %v", err)
		}
		if out, _, err := run(t, "", "module", "pull", "--allow-tag", tagged, "-o", dst); err != nil || strings.TrimSpace(out) != pinned {
			t.Fatalf("pull --allow-tag printed %q, %v", out, err)
		}
	})

	t.Run("save and load, offline", func(t *testing.T) {
		archive := filepath.Join(t.TempDir(), "modules.tar")
		if _, _, err := run(t, "", "module", "save", pinned, "-o", archive); err != nil {
			t.Fatal(err)
		}
		reg.Close() // the nodes cannot reach the registry
		cache := t.TempDir()
		out, _, err := run(t, "", "module", "load", archive, "--cache-dir", cache)
		if err != nil || strings.TrimSpace(out) != pinned {
			t.Fatalf("load printed %q, %v", out, err)
		}
		// What was loaded is in the cache wasp run --cache-dir reads.
		if _, _, err := run(t, "", "module", "inspect", "--cache-dir", cache, pinned); err != nil {
			t.Fatal(err)
		}
	})
}

// TestModuleOverPool: inspect and push refuse a module whose declared
// minimum memory, times the instances a node runs, is over its memory
// pool: wasp run could not create its second instance.
func TestModuleOverPool(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(2)) // two instances
	file := filepath.Join(t.TempDir(), "big.wasm")
	if err := os.WriteFile(file, withMemory(t, 193<<20>>16), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "", "module", "inspect", file)
	if !errors.Is(err, runtime.ErrInvalidModule) || !strings.Contains(err.Error(), "over the module's memory pool") {
		t.Fatalf("inspect: %v (output %q), want ErrInvalidModule naming the memory pool", err, out)
	}
	if err := os.WriteFile(file, withMemory(t, 16), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "", "module", "inspect", file); err != nil {
		t.Fatalf("inspect of the same module with a 1 MiB minimum: %v", err)
	}
}

// withMemory returns a module that loads, whose memory's declared
// minimum is pages pages.
func withMemory(t *testing.T, pages int) []byte {
	t.Helper()
	sec := func(id byte, payload ...byte) []byte {
		return append(append([]byte{id}, binary.AppendUvarint(nil, uint64(len(payload)))...), payload...)
	}
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	exports := []byte{4}
	for i, e := range []string{abi.MarkerExport, abi.BufferExport, abi.StageTopology.Export()} {
		exports = append(exports, name(e)...)
		exports = append(exports, 0, byte(i))
	}
	exports = append(exports, name("memory")...)
	exports = append(exports, 2, 0)
	meta := append(name(abi.MetadataSection), `{"name":"big","version":"0.0.1","abi":1,"stages":["topology"]}`...)
	b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	b = append(b, sec(1, 3, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 2, 0x7f, 0x7f, 1, 0x7e)...) // () -> (), (i32) -> i32, (i32, i32) -> i64
	b = append(b, sec(3, 3, 0, 1, 2)...)
	b = append(b, sec(5, append([]byte{1, 0}, binary.AppendUvarint(nil, uint64(pages))...)...)...)
	b = append(b, sec(7, exports...)...)
	b = append(b, sec(10, 3, 2, 0, 0x0b, 4, 0, 0x41, 0, 0x0b, 4, 0, 0x42, 0, 0x0b)...)
	b = append(b, 0, byte(len(meta)))
	b = append(b, meta...)
	return b
}

// unloadable returns a module that passes runtime.Inspect, every export it
// needs present by name, but cannot load: they are all one function of
// type () -> ().
func unloadable(t *testing.T) []byte {
	t.Helper()
	sec := func(id byte, payload ...byte) []byte { return append([]byte{id, byte(len(payload))}, payload...) }
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	exports := []byte{4}
	for _, e := range []string{abi.MarkerExport, abi.BufferExport, "memory", abi.StageTopology.Export()} {
		exports = append(exports, name(e)...)
		exports = append(exports, 0, 0) // function 0
	}
	meta := append(name(abi.MetadataSection), `{"name":"unloadable","version":"0.0.1","abi":1,"stages":["topology"]}`...)
	b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	b = append(b, sec(1, 1, 0x60, 0, 0)...) // type () -> ()
	b = append(b, sec(3, 1, 0)...)          // one function
	b = append(b, sec(7, exports...)...)
	b = append(b, sec(10, 1, 2, 0, 0x0b)...) // its body: end
	b = append(b, 0, byte(len(meta)))
	b = append(b, meta...)
	if _, err := runtime.Inspect(b); err != nil {
		t.Fatalf("the module does not pass Inspect: %v", err)
	}
	return b
}

// TestModuleUnloadable: inspect and push refuse a module that passes
// Inspect but cannot load, with the loader's reason, value types by name.
func TestModuleUnloadable(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	reg := ocitest.New(t)
	file := filepath.Join(t.TempDir(), "unloadable.wasm")
	if err := os.WriteFile(file, unloadable(t), 0o644); err != nil {
		t.Fatal(err)
	}
	const want = `export "wasp_buffer" has signature () -> (), want (i32) -> (i32)`
	for _, args := range [][]string{
		{"module", "inspect", file},
		{"module", "push", file, "oci://" + reg.Host + "/wasp/unloadable:v1"},
	} {
		t.Run(args[1], func(t *testing.T) {
			out, _, err := run(t, "", args...)
			if !errors.Is(err, runtime.ErrInvalidModule) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
				t.Fatalf("got %v (output %q), want ErrInvalidModule naming %s: %s", err, out, file, want)
			}
		})
	}
	if _, _, err := run(t, "", "module", "pull", "--allow-tag", "oci://"+reg.Host+"/wasp/unloadable:v1", "-o", filepath.Join(t.TempDir(), "x.wasm")); err == nil {
		t.Fatal("push pushed the module anyway")
	}
}

// TestInspectionEscaped: the text inspect prints from a module and its
// registry has its terminal controls escaped, those JSON leaves alone
// (C1 controls, bidirectional overrides) included.
func TestInspectionEscaped(t *testing.T) {
	in := inspection{
		Metadata:        &metadata.Metadata{Name: "m", Description: "fine\u009b2J\u202eevil"},
		Annotations:     map[string]string{"org.opencontainers.image.title": "\x1b]0;owned\a"},
		Signatures:      "not verified: \x1b[31m",
		SignaturesFound: []oci.FoundSignature{{Layout: "bundle", Signer: "ops\u202e@example.com"}},
	}
	in.escape()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(in); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Metadata        struct{ Description string }
		Annotations     map[string]string
		Signatures      string
		SignaturesFound []struct{ Signer string }
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{back.Metadata.Description, back.Annotations["org.opencontainers.image.title"], back.Signatures, back.SignaturesFound[0].Signer} {
		if strings.ContainsAny(s, "\x1b\a\u009b\u202e") {
			t.Errorf("%q holds a control character", s)
		}
	}
	if back.Metadata.Description != `fine\u009b2J\u202eevil` {
		t.Errorf("description %q", back.Metadata.Description)
	}
}
