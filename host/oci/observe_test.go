package oci_test

import (
	"bytes"
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/internal/ocitest"
)

// counter is an oci.Observer that counts what it is told.
type counter struct {
	mu     sync.Mutex
	pulls  map[oci.PullResult]int
	hits   int
	misses int
}

func (c *counter) Pulled(r oci.PullResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pulls[r]++
}

func (c *counter) BlobCache(hit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hit {
		c.hits++
	} else {
		c.misses++
	}
}

// TestObserver pulls a module through a cache in the ways a node does and
// checks what the Observer is told: each Pull's result, and a hit or miss
// for each of the module's three blobs (manifest, config, layer).
func TestObserver(t *testing.T) {
	reg := ocitest.New(t)
	pushed := push(t, reg)
	dir := t.TempDir()
	unpinned := "oci://" + reg.Host + "/wasp/selection:v1"
	corrupt := bytes.Clone(reg.Get(pushed.WasmDigest))
	corrupt[len(corrupt)/2] ^= 0xff

	steps := []struct {
		name         string
		before       func()
		cacheDir     string // "": the test's cache
		ref          string // "": the pushed module, pinned
		want         oci.PullResult
		hits, misses int
	}{
		{name: "first pull", want: oci.PullPulled, misses: 3},
		{name: "from the cache", want: oci.PullCached, hits: 3},
		{name: "tag", ref: unpinned, want: oci.PullInvalid},
		{name: "not in the registry", before: func() { reg.Delete(pushed.WasmDigest) },
			cacheDir: t.TempDir(), want: oci.PullNotFound, misses: 3},
		{name: "other content served", before: func() { reg.Serve(pushed.WasmDigest, corrupt) },
			cacheDir: t.TempDir(), want: oci.PullDigestMismatch, misses: 3},
		{name: "credentials required", before: func() { reg.RequireBasicAuth("user", "secret") },
			cacheDir: t.TempDir(), want: oci.PullUnauthorized, misses: 1},
		{name: "registry down, cached", before: reg.Close, want: oci.PullCached, hits: 3},
		{name: "registry down, not cached", cacheDir: t.TempDir(), want: oci.PullUnavailable, misses: 1},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		cacheDir, ref := st.cacheDir, st.ref
		if cacheDir == "" {
			cacheDir = dir
		}
		if ref == "" {
			ref = pushed.Reference
		}
		c := &counter{pulls: map[oci.PullResult]int{}}
		_, err := newClient(t, oci.Options{CacheDir: cacheDir, Observer: c}).Pull(context.Background(), ref)
		if want := map[oci.PullResult]int{st.want: 1}; !maps.Equal(c.pulls, want) {
			t.Errorf("%s: pulls %v (err %v), want %v", st.name, c.pulls, err, want)
		}
		if c.hits != st.hits || c.misses != st.misses {
			t.Errorf("%s: %d cache hits, %d misses; want %d, %d", st.name, c.hits, c.misses, st.hits, st.misses)
		}
	}
}

// TestPullResultOf classifies the errors a Pull wraps.
func TestPullResultOf(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want oci.PullResult
	}{
		{oci.ErrNoSignature, oci.PullSignature},
		{oci.ErrBadSignature, oci.PullSignature},
		{oci.ErrSignatureMismatch, oci.PullSignature},
		{oci.ErrMalformedSignature, oci.PullSignature},
		{oci.ErrDigestMismatch, oci.PullDigestMismatch},
		{oci.ErrNotWasm, oci.PullInvalid},
		{oci.ErrTooLarge, oci.PullInvalid},
		{context.DeadlineExceeded, oci.PullUnavailable},
		{context.Canceled, oci.PullError},
	} {
		if got := oci.PullResultOf(nil, tt.err); got != tt.want {
			t.Errorf("PullResultOf(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
