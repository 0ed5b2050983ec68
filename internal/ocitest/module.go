package ocitest

import (
	"context"
	"testing"

	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/modules"
)

// Module returns the builtin selection module and its metadata, the
// module the tests push.
func Module(t testing.TB) ([]byte, *metadata.Metadata) {
	t.Helper()
	wasm, err := modules.Wasm("selection")
	if err != nil {
		t.Fatal(err)
	}
	meta, err := runtime.Inspect(wasm)
	if err != nil {
		t.Fatal(err)
	}
	return wasm, meta
}

// PushModule pushes Module to r as wasp/selection:v1, with a client of no
// options, and returns the artifact.
func PushModule(t testing.TB, r *Registry) *oci.Artifact {
	t.Helper()
	wasm, meta := Module(t)
	c, err := oci.New(oci.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Push(context.Background(), "oci://"+r.Host+"/wasp/selection:v1", wasm, meta)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
