package oci

import (
	"fmt"
	"strings"

	"oras.land/oras-go/v2/registry"
)

// Scheme prefixes every module source this package resolves.
const Scheme = "oci://"

// Reference is a parsed oci:// module reference.
type Reference struct {
	Registry   string // host[:port]
	Repository string
	Tag        string // "" when pinned by digest only
	Digest     string // "sha256:HEX", "" when only a tag is given
}

// ParseReference parses oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST].
// A reference without a tag or digest is valid only to push to.
func ParseReference(s string) (Reference, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Reference{}, fmt.Errorf("reference %q: want %sREGISTRY/REPOSITORY@sha256:DIGEST", s, Scheme)
	}
	var r Reference
	if before, dgst, ok := strings.Cut(rest, "@"); ok {
		rest, r.Digest = before, dgst
	}
	ref, err := registry.ParseReference(rest)
	if err != nil {
		return Reference{}, fmt.Errorf("reference %q: %w", s, err)
	}
	r.Registry, r.Repository, r.Tag = ref.Registry, ref.Repository, ref.Reference
	if r.Digest != "" {
		d, err := registry.ParseReference(rest + "@" + r.Digest)
		if err != nil {
			return Reference{}, fmt.Errorf("reference %q: %w", s, err)
		}
		if _, err := d.Digest(); err != nil {
			return Reference{}, fmt.Errorf("reference %q: %w", s, err)
		}
	}
	return r, nil
}

// Pinned returns the reference by digest: oci://REGISTRY/REPOSITORY@DIGEST.
func (r Reference) Pinned(digest string) string {
	return Scheme + r.Registry + "/" + r.Repository + "@" + digest
}

// String returns the reference as it was given.
func (r Reference) String() string {
	s := Scheme + r.Registry + "/" + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}
