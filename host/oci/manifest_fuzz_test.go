package oci

import (
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi/metadata"
)

// FuzzParseManifest: whatever a registry serves as a module's manifest,
// parsing it returns an error or the manifest's one Wasm layer, never
// panics.
func FuzzParseManifest(f *testing.F) {
	_, _, m, err := pack([]byte("\x00asm\x01\x00\x00\x00"), &metadata.Metadata{Name: "m", Version: "1.0.0"})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{string(m.data), "", "{}", "null", `{"layers":[{},{}]}`,
		`{"mediaType":"application/vnd.oci.image.index.v1+json"}`,
		`{"layers":[{"mediaType":"` + LayerMediaType + `"},{"mediaType":"` + LayerMediaType + `"}]}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, layer, err := parseManifest(data)
		if err != nil {
			if got != nil {
				t.Fatalf("error %v with a manifest", err)
			}
			return
		}
		if !isWasmLayer(layer.MediaType) {
			t.Fatalf("layer of media type %q returned as the Wasm layer", layer.MediaType)
		}
		n := 0
		for _, l := range got.Layers {
			if isWasmLayer(l.MediaType) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("accepted a manifest with %d Wasm layers", n)
		}
	})
}

// FuzzParseReference: a module reference from the configuration or the
// command line parses to one that prints back to a reference that parses
// the same, or is refused with an error naming it.
func FuzzParseReference(f *testing.F) {
	for _, seed := range []string{"oci://registry.example/wasp/m:1.0", "oci://registry.example:5000/m@sha256:" + strings.Repeat("a", 64),
		"oci://r/m:t@sha256:" + strings.Repeat("0", 64), "registry.example/m", "oci://", "oci://r/M", "oci://r/m@sha256:x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReference(s)
		if err != nil {
			if !strings.Contains(err.Error(), "reference") {
				t.Fatalf("error %q does not say what was refused", err)
			}
			return
		}
		again, err := ParseReference(r.String())
		if err != nil {
			t.Fatalf("%q parsed as %+v, whose string %q does not parse: %v", s, r, r.String(), err)
		}
		if again != r {
			t.Fatalf("%q parsed as %+v, its string %q as %+v", s, r, r.String(), again)
		}
	})
}
