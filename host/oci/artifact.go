package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
)

// Media types of the CNCF Wasm artifact layout, which Push writes.
const (
	ConfigMediaType = "application/vnd.wasm.config.v0+json"
	LayerMediaType  = "application/wasm"
)

// legacyLayerMediaTypes are module layers of other Wasm plugin systems,
// accepted on read: Kubewarden's and Istio's (solo.io) layouts.
var legacyLayerMediaTypes = []string{
	"application/vnd.wasm.content.layer.v1+wasm",
	"application/vnd.module.wasm.content.layer.v1+wasm",
}

// Manifest annotations Push sets from the module's metadata. The
// org.opencontainers.image keys are the image-spec's own; the dev.wasp keys
// carry what has no standard key.
const (
	AnnotationTitle       = ocispec.AnnotationTitle       // metadata.name
	AnnotationVersion     = ocispec.AnnotationVersion     // metadata.version
	AnnotationDescription = ocispec.AnnotationDescription // metadata.description
	AnnotationABI         = "dev.wasp.module.abi"         // metadata.abi, decimal
	AnnotationStages      = "dev.wasp.module.stages"      // metadata.stages, comma-separated
	AnnotationMinHost     = "dev.wasp.module.min-host-version"
	AnnotationMetadata    = "dev.wasp.module.metadata" // the metadata section's JSON, verbatim
)

// Limits on what is read from a registry, an archive or the cache. A
// manifest of one layer is a few hundred bytes; the modules wasp ships are
// under 4 MiB.
const (
	maxManifestSize = 4 << 20
	maxConfigSize   = 1 << 20
	// DefaultMaxModuleSize caps a module's layer when Options.MaxModuleSize
	// is zero: the ABI's limit on any module.
	DefaultMaxModuleSize = abi.MaxModuleSize
)

// Errors a caller may act on; the returned errors wrap them with the
// reference and the digests involved.
var (
	ErrDigestMismatch = errors.New("digest mismatch")
	ErrNotWasm        = errors.New("not a Wasm module artifact")
	ErrTooLarge       = errors.New("too large")
	ErrNotPinned      = errors.New("not pinned by digest")
	ErrUnauthorized   = errors.New("registry refused the credentials")
	ErrNotFound       = errors.New("not found")
)

// wasmConfig is the artifact config of the CNCF Wasm layout.
type wasmConfig struct {
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	LayerDigests []digest.Digest `json:"layerDigests"`
}

// Annotations returns the manifest annotations for a module's metadata.
func Annotations(meta *metadata.Metadata) (map[string]string, error) {
	raw, err := meta.Marshal()
	if err != nil {
		return nil, err
	}
	a := map[string]string{
		AnnotationTitle:    meta.Name,
		AnnotationVersion:  meta.Version,
		AnnotationABI:      strconv.Itoa(meta.ABI),
		AnnotationStages:   strings.Join(meta.Stages, ","),
		AnnotationMetadata: string(raw),
	}
	if meta.Description != "" {
		a[AnnotationDescription] = meta.Description
	}
	if meta.MinHostVersion != "" {
		a[AnnotationMinHost] = meta.MinHostVersion
	}
	return a, nil
}

// blob is content with its descriptor.
type blob struct {
	desc ocispec.Descriptor
	data []byte
}

func newBlob(mediaType string, data []byte) blob {
	return blob{ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}, data}
}

// pack builds the config and manifest of a module. The result depends only
// on its inputs (no creation time), so the same module and metadata always
// give the same manifest digest.
func pack(wasm []byte, meta *metadata.Metadata) (config, layer, manifest blob, err error) {
	annotations, err := Annotations(meta)
	if err != nil {
		return blob{}, blob{}, blob{}, err
	}
	layer = newBlob(LayerMediaType, wasm)
	layer.desc.Annotations = map[string]string{ocispec.AnnotationTitle: meta.Name + ".wasm"}
	cfg, err := json.Marshal(wasmConfig{Architecture: "wasm", OS: "wasip1", LayerDigests: []digest.Digest{layer.desc.Digest}})
	if err != nil {
		return blob{}, blob{}, blob{}, err
	}
	config = newBlob(ConfigMediaType, cfg)
	m, err := json.Marshal(ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      config.desc,
		Layers:      []ocispec.Descriptor{layer.desc},
		Annotations: annotations,
	})
	if err != nil {
		return blob{}, blob{}, blob{}, err
	}
	return config, layer, newBlob(ocispec.MediaTypeImageManifest, m), nil
}

// parseManifest decodes a module artifact's manifest and returns it with its
// Wasm layer.
func parseManifest(data []byte) (*ocispec.Manifest, ocispec.Descriptor, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, ocispec.Descriptor{}, fmt.Errorf("%w: manifest: %w", ErrNotWasm, err)
	}
	if m.MediaType != "" && m.MediaType != ocispec.MediaTypeImageManifest && m.MediaType != "application/vnd.docker.distribution.manifest.v2+json" {
		return nil, ocispec.Descriptor{}, fmt.Errorf("%w: manifest media type %q (want %s)", ErrNotWasm, m.MediaType, ocispec.MediaTypeImageManifest)
	}
	var wasm []ocispec.Descriptor
	var types []string
	for _, l := range m.Layers {
		types = append(types, l.MediaType)
		if isWasmLayer(l.MediaType) {
			wasm = append(wasm, l)
		}
	}
	switch len(wasm) {
	case 1:
		return &m, wasm[0], nil
	case 0:
		return nil, ocispec.Descriptor{}, fmt.Errorf("%w: no %s layer (layers: %v)", ErrNotWasm, LayerMediaType, types)
	}
	return nil, ocispec.Descriptor{}, fmt.Errorf("%w: %d Wasm layers, want one", ErrNotWasm, len(wasm))
}

func isWasmLayer(mediaType string) bool {
	if mediaType == LayerMediaType {
		return true
	}
	for _, t := range legacyLayerMediaTypes {
		if mediaType == t {
			return true
		}
	}
	return false
}

// verify checks data against a descriptor's size and digest.
func verify(desc ocispec.Descriptor, data []byte) error {
	if int64(len(data)) != desc.Size {
		return fmt.Errorf("%s: %w: got %d bytes, want %d", desc.Digest, ErrDigestMismatch, len(data), desc.Size)
	}
	return verifyDigest(desc.Digest, data)
}

func verifyDigest(want digest.Digest, data []byte) error {
	if err := want.Validate(); err != nil {
		return fmt.Errorf("digest %q: %w", want, err)
	}
	if got := want.Algorithm().FromBytes(data); got != want {
		return fmt.Errorf("%w: got %s, want %s", ErrDigestMismatch, got, want)
	}
	return nil
}
