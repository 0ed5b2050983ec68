package oci

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
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
