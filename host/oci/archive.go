package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
)

// Save writes the modules of refs, pulled and verified, to w as a tar
// archive of an OCI image layout: the format `wasp module load` reads on a
// node without registry access. Each manifest is named (its
// org.opencontainers.image.ref.name) by its reference pinned by digest,
// without the oci:// scheme. A module's signature manifest, if its registry
// has one, is saved with its blobs too, named
// REGISTRY/REPOSITORY:sha256-HEX.sig, and so are its Sigstore bundles, as
// the layers of a manifest named REGISTRY/REPOSITORY:sha256-HEX.bundles.
func (c *Client) Save(ctx context.Context, refs []string, w io.Writer) ([]*Artifact, error) {
	dir, err := os.MkdirTemp("", "wasp-save-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	store, err := oci.NewWithContext(ctx, dir)
	if err != nil {
		return nil, err
	}
	var out []*Artifact
	for _, ref := range refs {
		a, err := c.Pull(ctx, ref)
		if err != nil {
			return nil, err
		}
		mdesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: a.ManifestDigest, Size: int64(len(a.manifest))}
		wdesc := ocispec.Descriptor{MediaType: a.WasmMediaType, Digest: a.WasmDigest, Size: int64(len(a.Wasm))}
		for _, b := range []blob{{a.configDesc, a.config}, {wdesc, a.Wasm}, {mdesc, a.manifest}} {
			if err := store.Push(ctx, b.desc, bytes.NewReader(b.data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
				return nil, fmt.Errorf("save %q: %w", ref, err)
			}
		}
		if err := store.Tag(ctx, mdesc, strings.TrimPrefix(a.Reference, Scheme)); err != nil {
			return nil, fmt.Errorf("save %q: %w", ref, err)
		}
		if err := c.saveSignatures(ctx, store, a); err != nil {
			return nil, fmt.Errorf("save %q: signatures: %w", ref, err)
		}
		if err := c.saveBundles(ctx, store, a); err != nil {
			return nil, fmt.Errorf("save %q: signature bundles: %w", ref, err)
		}
		out = append(out, a)
	}
	if err := writeTar(w, dir); err != nil {
		return nil, err
	}
	return out, nil
}

// Load puts the modules of an archive written by Save into the cache, each
// verified, so that their references pinned by digest resolve on a node
// that cannot reach their registry. Signature manifests go into the cache
// as the signatures of their modules, checked against their digests only: a
// pull with public keys verifies them.
func (c *Client) Load(ctx context.Context, archive string) ([]*Artifact, error) {
	if c.cache == nil {
		return nil, errors.New("load: no cache directory to load into")
	}
	store, err := oci.NewFromTar(ctx, archive)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", archive, err)
	}
	var names []string
	if err := store.Tags(ctx, "", func(tags []string) error {
		names = append(names, tags...)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load %s: %w", archive, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("load %s: no named manifests (want an archive written by wasp module save)", archive)
	}
	var out []*Artifact
	for _, name := range names {
		ref := Scheme + name
		r, err := ParseReference(ref)
		if err == nil && r.Digest == "" && strings.HasSuffix(r.Tag, ".sig") {
			if err := c.loadSignatures(ctx, store, name, r.Tag); err != nil {
				return nil, fmt.Errorf("load %s: %q: %w", archive, name, err)
			}
			continue
		}
		if err == nil && r.Digest == "" && strings.HasSuffix(r.Tag, bundlesSuffix) {
			if err := c.loadBundles(ctx, store, name, r.Tag); err != nil {
				return nil, fmt.Errorf("load %s: %q: %w", archive, name, err)
			}
			continue
		}
		if err != nil || r.Digest == "" {
			return nil, fmt.Errorf("load %s: manifest name %q is no reference pinned by digest", archive, name)
		}
		desc, err := store.Resolve(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("load %s: %q: %w", archive, name, err)
		}
		if desc.Digest != digest.Digest(r.Digest) {
			return nil, fmt.Errorf("load %s: %q: %w: the archive's manifest is %s", archive, name, ErrDigestMismatch, desc.Digest)
		}
		a, err := c.get(ctx, r, desc.Digest, func(ctx context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
			if d.Size < 0 {
				d.Size = desc.Size
			}
			return store.Fetch(ctx, d)
		})
		if err != nil {
			return nil, fmt.Errorf("load %s: %q: %w", archive, name, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// repositoryOf returns the reference and repository of a pulled module.
func (c *Client) repositoryOf(a *Artifact) (Reference, *remote.Repository, error) {
	r, err := ParseReference(a.Reference)
	if err != nil {
		return Reference{}, nil, err
	}
	repo, err := c.repository(r)
	return r, repo, err
}

// saveSignatures adds the module's signature manifest, if its registry has
// one, and the blobs it names to store, named
// REGISTRY/REPOSITORY:sha256-HEX.sig. They are copied as they are: whoever
// pulls with public keys verifies them.
func (c *Client) saveSignatures(ctx context.Context, store *oci.Store, a *Artifact) error {
	r, repo, err := c.repositoryOf(a)
	if err != nil {
		return err
	}
	tag := SignatureTag(a.ManifestDigest)
	_, data, err := fetchSignatureManifest(ctx, repo, tag)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%s: %w: %w", tag, ErrMalformedSignature, err)
	}
	if len(m.Layers) > maxSignatureLayers {
		return fmt.Errorf("%s: %w: %d layers", tag, ErrTooLarge, len(m.Layers))
	}
	for i, desc := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		limit := int64(maxPayloadSize)
		if i == 0 {
			limit = maxConfigSize
		}
		data, _, err := c.fetch(ctx, func(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
			rc, err := repo.Blobs().Fetch(ctx, desc)
			return rc, registryError("fetch", err)
		}, desc, limit)
		if err != nil {
			return fmt.Errorf("%s: blob %s: %w", tag, desc.Digest, err)
		}
		if err := store.Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return err
		}
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := store.Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return err
	}
	return store.Tag(ctx, desc, r.Registry+"/"+r.Repository+":"+tag)
}

// loadSignatures puts the signature manifest named name (tagged tag,
// sha256-HEX.sig) and its blobs in the cache, as the signatures of manifest
// sha256:HEX, each checked against its digest. They are verified when a
// pull with public keys reads them.
func (c *Client) loadSignatures(ctx context.Context, store *oci.ReadOnlyStore, name, tag string) error {
	alg, hex, ok := strings.Cut(strings.TrimSuffix(tag, ".sig"), "-")
	module := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	if !ok || module.Validate() != nil {
		return fmt.Errorf("signature tag %q: want sha256-HEX.sig", tag)
	}
	desc, err := store.Resolve(ctx, name)
	if err != nil {
		return err
	}
	fetch := func(desc ocispec.Descriptor, limit int64) ([]byte, error) {
		data, err := fetchChecked(ctx, store, desc, limit)
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
		}
		return data, c.cache.put(desc.Digest, data)
	}
	data, err := fetch(desc, maxManifestSize)
	if err != nil {
		return err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedSignature, err)
	}
	for _, l := range m.Layers {
		if l.MediaType != SignatureMediaType {
			continue
		}
		if _, err := fetch(l, maxPayloadSize); err != nil {
			return err
		}
	}
	return writeFile(c.cache.signaturePath(module), []byte(desc.Digest.String()))
}

// bundlesSuffix ends the name of the manifest that carries a module's
// Sigstore bundles in an archive: sha256-HEX.bundles.
const bundlesSuffix = ".bundles"

// saveBundles adds the module's Sigstore bundles, if it has any, to store
// as the layers of a manifest named REGISTRY/REPOSITORY:sha256-HEX.bundles.
// They are copied as they are: whoever pulls with a policy verifies them.
func (c *Client) saveBundles(ctx context.Context, store *oci.Store, a *Artifact) error {
	r, repo, err := c.repositoryOf(a)
	if err != nil {
		return err
	}
	bundles, _, err := fetchBundles(ctx, repo, a.ManifestDigest) // unusable ones are left out
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if len(bundles) == 0 {
		return nil
	}
	empty := newBlob(ocispec.MediaTypeEmptyJSON, []byte("{}"))
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, ArtifactType: BundleMediaType, Config: empty.desc}
	for _, b := range append(bundles, empty) {
		if err := store.Push(ctx, b.desc, bytes.NewReader(b.data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
			return err
		}
		if b.desc.Digest != empty.desc.Digest {
			m.Layers = append(m.Layers, b.desc)
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	desc := newBlob(ocispec.MediaTypeImageManifest, data).desc
	if err := store.Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return err
	}
	tag := a.ManifestDigest.Algorithm().String() + "-" + a.ManifestDigest.Encoded() + bundlesSuffix
	return store.Tag(ctx, desc, r.Registry+"/"+r.Repository+":"+tag)
}

// loadBundles puts the bundles of the manifest named name (tagged tag,
// sha256-HEX.bundles) in the cache as the bundles of manifest
// sha256:HEX, each checked against its digest. They are verified when a
// pull with a policy reads them.
func (c *Client) loadBundles(ctx context.Context, store *oci.ReadOnlyStore, name, tag string) error {
	alg, hex, ok := strings.Cut(strings.TrimSuffix(tag, bundlesSuffix), "-")
	module := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	if !ok || module.Validate() != nil {
		return fmt.Errorf("bundles tag %q: want sha256-HEX%s", tag, bundlesSuffix)
	}
	desc, err := store.Resolve(ctx, name)
	if err != nil {
		return err
	}
	data, err := fetchChecked(ctx, store, desc, maxManifestSize)
	if err != nil {
		return err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedSignature, err)
	}
	if len(m.Layers) > maxSignatureLayers {
		return fmt.Errorf("%w: %d bundles", ErrTooLarge, len(m.Layers))
	}
	var bundles []blob
	for _, l := range m.Layers {
		b, err := fetchChecked(ctx, store, l, maxBundleSize)
		if err != nil {
			return fmt.Errorf("bundle %s: %w", l.Digest, err)
		}
		bundles = append(bundles, blob{l, b})
	}
	return c.cacheBundles(module, bundles)
}

// writeTar writes the files under dir to w, in lexical order, with
// normalised headers so the same layout gives the same archive.
func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755})
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
