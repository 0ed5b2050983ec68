package modules_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/wasp-proxy/wasp/modules"
)

// TestDigest: the embedded build's SHA256SUMS names its bytes, so that a
// hand-edited module or a stale sums file fails here, besides make
// modules-check.
func TestDigest(t *testing.T) {
	for _, b := range modules.Builtins {
		wasm, err := modules.Wasm(b.Name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(wasm)
		got, err := modules.Digest(b.Name)
		if want := "sha256:" + hex.EncodeToString(sum[:]); err != nil || got != want {
			t.Errorf("Digest(%q) = %q, %v; want %q", b.Name, got, err, want)
		}
	}
	if _, err := modules.Digest("zones"); err == nil {
		t.Error(`Digest("zones"): no error`)
	}
}
