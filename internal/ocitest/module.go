package ocitest

import (
	"testing"

	"github.com/wasp-proxy/wasp/abi/metadata"
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
