package oci

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// cache keeps blobs by digest under dir/blobs/ALGORITHM/HEX, the layout of
// an OCI image layout's blobs. Blobs are written to a temporary file and
// renamed, so a reader never sees a partial blob, and checked against their
// digest on every read, so a corrupted file is refetched, never served.
type cache struct {
	dir string
}

func (c *cache) path(d digest.Digest) string {
	return filepath.Join(c.dir, "blobs", d.Algorithm().String(), d.Encoded())
}

// get returns the blob of digest d, or an error wrapping fs.ErrNotExist if
// it is not cached (or was corrupt, and was removed).
func (c *cache) get(d digest.Digest, limit int64) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("digest %q: %w", d, err)
	}
	f, err := os.Open(c.path(d))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("cached blob %s: %w (over %d bytes)", d, ErrTooLarge, limit)
	}
	if err := verifyDigest(d, data); err != nil {
		// Corrupt on disk: drop it so that it is fetched again.
		_ = os.Remove(c.path(d))
		return nil, fmt.Errorf("cached blob %s: %w: %w", d, fs.ErrNotExist, err)
	}
	return data, nil
}

// put stores data, which must have digest d.
func (c *cache) put(d digest.Digest, data []byte) error {
	if err := verifyDigest(d, data); err != nil {
		return err
	}
	p := c.path(d)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	return writeFile(p, data)
}

// writeFile writes data to p through a temporary file and a rename, so that
// a reader never sees part of it.
func writeFile(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Signatures verified on a pull, or loaded from an archive, are kept so
// that a digest-pinned module still verifies while its registry is down: the
// signature manifest and its payloads as blobs, and under
// signatures/ALGORITHM/HEX (the module's manifest digest) the digest of that
// signature manifest. The signatures are verified again on every read, with
// the keys of the pull that reads them.

func (c *cache) signaturePath(d digest.Digest) string {
	return filepath.Join(c.dir, "signatures", d.Algorithm().String(), d.Encoded())
}

// cachedSignatureManifest is a signature manifest read from the cache.
type cachedSignatureManifest struct {
	manifest digest.Digest
	data     []byte
}

// cachedSignatures returns the signature manifest cached for module
// manifest d.
func (c *Client) cachedSignatures(d digest.Digest) (*cachedSignatureManifest, error) {
	if c.cache == nil {
		return nil, errors.New("no cache")
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	link, err := os.ReadFile(c.cache.signaturePath(d))
	if err != nil {
		return nil, err
	}
	sd, err := digest.Parse(string(link))
	if err != nil {
		return nil, fmt.Errorf("cached signatures of %s: %w", d, err)
	}
	data, err := c.cache.get(sd, maxManifestSize)
	if err != nil {
		return nil, err
	}
	return &cachedSignatureManifest{sd, data}, nil
}

// cachedBlob returns a cached blob, checked against its descriptor.
func (c *Client) cachedBlob(desc ocispec.Descriptor) ([]byte, error) {
	data, err := c.cache.get(desc.Digest, maxPayloadSize)
	if err != nil {
		return nil, err
	}
	return data, verify(desc, data)
}

// cacheSignatures keeps the verified signatures of module manifest d.
func (c *Client) cacheSignatures(d, manifest digest.Digest, data []byte, payloads []blob) error {
	for _, p := range payloads {
		if err := c.cache.put(p.desc.Digest, p.data); err != nil {
			return err
		}
	}
	if err := c.cache.put(manifest, data); err != nil {
		return err
	}
	return writeFile(c.cache.signaturePath(d), []byte(manifest.String()))
}
