package builds_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/modules"
	"github.com/wasp-proxy/wasp/modules/builds"
)

// TestEmbedded: package modules embeds the build modules.Build names,
// byte for byte (its go:embed pattern and its constant agree).
func TestEmbedded(t *testing.T) {
	for _, m := range modules.Builtins {
		got, err := modules.Wasm(m.Name)
		if err != nil {
			t.Fatal(err)
		}
		want, err := builds.Wasm(builds.Build(modules.Build), m.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("modules.Wasm(%q) is not the %s build's", m.Name, modules.Build)
		}
	}
}

// TestBuilds: every build of every default module is named by its
// SHA256SUMS, implements its stage, and carries its module.json as
// metadata, which is what wasp reports for a builtin whichever build it
// embeds.
func TestBuilds(t *testing.T) {
	for _, b := range builds.All {
		sums, err := builds.SHA256SUMS(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range modules.Builtins {
			wasm, err := builds.Wasm(b, m.Name)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(wasm)
			if line := fmt.Sprintf("%s  %s.wasm\n", hex.EncodeToString(sum[:]), m.Dir); !bytes.Contains(sums, []byte(line)) {
				t.Errorf("%s/SHA256SUMS has no line %q", b, line)
			}
			got, err := runtime.Inspect(wasm)
			if err != nil {
				t.Fatalf("%s/%s: %v", b, m.Name, err)
			}
			want, err := modules.Metadata(m.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s/%s: metadata %+v, want module.json's %+v", b, m.Name, *got, *want)
			}
		}
	}
	if _, err := builds.Wasm(builds.Rust, "zones"); err == nil {
		t.Error(`Wasm(Rust, "zones"): no error`)
	}
}
