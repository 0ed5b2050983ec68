package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/klog/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/wasp-proxy/wasp/abi/metadata"
)

// Options configure a Client. The zero value pulls by digest, without a
// cache or credentials.
type Options struct {
	// CacheDir is the node-local blob cache, such as /var/lib/wasp/oci;
	// optional: "" fetches every time.
	CacheDir string
	// CredentialFiles are docker config files (~/.docker/config.json) or
	// Kubernetes pull secrets (the .dockerconfigjson file of a mounted
	// Secret, or the Secret object as JSON or YAML); optional. The first
	// file with credentials for a registry is used.
	CredentialFiles []string
	// DockerConfig adds docker's own configuration ($DOCKER_CONFIG or
	// ~/.docker/config.json, with its credential helpers) after
	// CredentialFiles; optional, for the command line.
	DockerConfig bool
	// PlainHTTP talks HTTP instead of HTTPS to every registry; optional.
	// Registries on a loopback address (127.0.0.1, [::1], localhost) are
	// always reached over HTTP.
	PlainHTTP bool
	// AllowTags lets Pull resolve a tag; optional: by default only
	// references pinned by digest are pulled.
	AllowTags bool
	// MaxModuleSize caps a module's layer; optional: 0 means
	// DefaultMaxModuleSize.
	MaxModuleSize int64
	// HTTPClient sends the requests; optional: nil uses a client with
	// retries.
	HTTPClient *http.Client
	// Signatures, when not empty, make Pull require signatures of the
	// module that satisfy every policy (see SignaturePolicy); optional.
	// The signatures are checked before any of the module's blobs is
	// fetched or read from the cache, and a module without a trusted
	// signature is an error wrapping ErrNoSignature, ErrBadSignature,
	// ErrSignatureMismatch or ErrMalformedSignature.
	Signatures []SignaturePolicy
	// Observer is told about every Pull and look-up in the cache, for
	// metrics; optional.
	Observer Observer
}

// Client pulls and pushes module artifacts.
type Client struct {
	opts  Options
	cache *cache
	cred  credentials.Store
}

// New returns a Client. It reads the credential files now, so that a
// malformed one fails at start-up.
func New(opts Options) (*Client, error) {
	c := &Client{opts: opts}
	if c.opts.MaxModuleSize <= 0 {
		c.opts.MaxModuleSize = DefaultMaxModuleSize
	}
	if opts.CacheDir != "" {
		c.cache = &cache{dir: opts.CacheDir}
	}
	var stores []credentials.Store
	for _, f := range opts.CredentialFiles {
		s, err := loadCredentialFile(f)
		if err != nil {
			return nil, err
		}
		stores = append(stores, s)
	}
	if opts.DockerConfig {
		s, err := credentials.NewStoreFromDocker(credentials.StoreOptions{})
		if err != nil {
			return nil, fmt.Errorf("docker config: %w", err)
		}
		stores = append(stores, s)
	}
	if len(stores) > 0 {
		c.cred = credentials.NewStoreWithFallbacks(stores[0], stores[1:]...)
	}
	return c, nil
}

// Artifact is a pulled module.
type Artifact struct {
	// Reference is the module pinned by digest:
	// oci://REGISTRY/REPOSITORY@sha256:HEX.
	Reference string
	// Tag is the tag the reference was resolved from, "" if it was pinned.
	Tag string
	// ManifestDigest and WasmDigest are the verified digests of the
	// manifest and the module layer.
	ManifestDigest digest.Digest
	WasmDigest     digest.Digest
	// WasmMediaType is the module layer's media type.
	WasmMediaType string
	// Annotations are the manifest's annotations.
	Annotations map[string]string
	// Wasm is the module.
	Wasm []byte
	// Cached reports that nothing was fetched: every blob came from the
	// cache.
	Cached bool
	// Signatures are the module's signatures verified with
	// Options.Signatures; nil when there are none to verify with.
	Signatures *Signatures

	manifest, config []byte
	configDesc       ocispec.Descriptor
}

// Pull returns the module of ref, from the cache if it holds the manifest
// and its blobs, else from the registry (and then caches them).
func (c *Client) Pull(ctx context.Context, ref string) (*Artifact, error) {
	r, err := c.parsePinned(ref)
	if err != nil {
		c.observePull(nil, err)
		return nil, err
	}
	a, err := c.pull(ctx, r)
	c.observePull(a, err)
	if err != nil {
		return nil, fmt.Errorf("module %q: %w", ref, err)
	}
	if a.Tag != "" {
		klog.FromContext(ctx).Info("Resolved module tag", "reference", ref, "digest", a.ManifestDigest)
	}
	return a, nil
}

// parsePinned parses a reference to pull: pinned by digest, or by a tag if
// Options.AllowTags is set.
func (c *Client) parsePinned(ref string) (Reference, error) {
	r, err := ParseReference(ref)
	if err != nil {
		return Reference{}, err
	}
	if r.Digest == "" {
		if r.Tag == "" {
			return Reference{}, fmt.Errorf("module %q: %w: give @sha256:DIGEST", ref, ErrNotPinned)
		}
		if !c.opts.AllowTags {
			return Reference{}, fmt.Errorf("module %q: %w: a tag can move; name the module as %s@sha256:DIGEST (wasp module inspect prints it)", ref, ErrNotPinned, Scheme+r.Registry+"/"+r.Repository)
		}
	}
	return r, nil
}

func (c *Client) pull(ctx context.Context, r Reference) (*Artifact, error) {
	var repo *remote.Repository
	getRepo := func() (*remote.Repository, error) {
		if repo == nil {
			var err error
			if repo, err = c.repository(r); err != nil {
				return nil, err
			}
		}
		return repo, nil
	}
	manifest := digest.Digest(r.Digest)
	if manifest == "" {
		repo, err := getRepo()
		if err != nil {
			return nil, err
		}
		desc, err := repo.Resolve(ctx, r.Tag)
		if err != nil {
			return nil, registryError("resolve tag "+r.Tag, err)
		}
		manifest = desc.Digest
	}
	var sigs *Signatures
	if len(c.opts.Signatures) > 0 {
		var err error
		if sigs, err = c.verifyPolicies(ctx, getRepo, r, manifest, c.opts.Signatures); err != nil {
			return nil, err
		}
	}
	a, err := c.get(ctx, r, manifest, func(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
		repo, err := getRepo()
		if err != nil {
			return nil, err
		}
		if desc.Size < 0 {
			_, rc, err := repo.Manifests().FetchReference(ctx, desc.Digest.String())
			return rc, registryError("fetch", err)
		}
		rc, err := repo.Blobs().Fetch(ctx, desc)
		return rc, registryError("fetch", err)
	})
	if err != nil {
		return nil, err
	}
	if r.Digest == "" {
		a.Tag = r.Tag
	}
	a.Signatures = sigs
	return a, nil
}

// fetchFunc fetches a blob, or a manifest of unknown size (desc.Size -1) by
// its digest.
type fetchFunc func(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error)

// get returns the artifact of manifest digest d in repository r, each blob
// from the cache or else from src.
func (c *Client) get(ctx context.Context, r Reference, d digest.Digest, src fetchFunc) (*Artifact, error) {
	a := &Artifact{Reference: r.Pinned(d.String()), ManifestDigest: d, Cached: true}
	fetch := func(desc ocispec.Descriptor, limit int64, what string) ([]byte, error) {
		data, cached, err := c.fetch(ctx, src, desc, limit)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", what, desc.Digest, err)
		}
		a.Cached = a.Cached && cached
		return data, nil
	}
	var err error
	manifest := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: d, Size: -1}
	if a.manifest, err = fetch(manifest, maxManifestSize, "manifest"); err != nil {
		return nil, err
	}
	m, layer, err := parseManifest(a.manifest)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d, err)
	}
	a.Annotations, a.configDesc = m.Annotations, m.Config
	if a.config, err = fetch(m.Config, maxConfigSize, "config"); err != nil {
		return nil, err
	}
	if a.Wasm, err = fetch(layer, c.opts.MaxModuleSize, "module layer"); err != nil {
		return nil, err
	}
	a.WasmDigest, a.WasmMediaType = layer.Digest, layer.MediaType
	return a, nil
}

// fetch returns a verified blob (a manifest of unknown size if desc.Size is
// -1), from the cache when it is there, else from src; what src gives is
// cached.
func (c *Client) fetch(ctx context.Context, src fetchFunc, desc ocispec.Descriptor, limit int64) (data []byte, cached bool, err error) {
	if desc.Size > limit {
		return nil, false, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, desc.Size, limit)
	}
	if c.cache != nil {
		data, err := c.cache.get(desc.Digest, limit)
		hit := err == nil && (desc.Size < 0 || int64(len(data)) == desc.Size)
		c.observeBlobCache(hit)
		if hit {
			return data, true, nil
		}
	}
	rc, err := src(ctx, desc)
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	data, err = io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, false, fmt.Errorf("fetch: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, false, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
	}
	if desc.Size >= 0 {
		err = verify(desc, data)
	} else {
		err = verifyDigest(desc.Digest, data)
	}
	if err != nil {
		return nil, false, fmt.Errorf("the content served is not what was asked for: %w", err)
	}
	if c.cache != nil {
		if err := c.cache.put(desc.Digest, data); err != nil {
			klog.FromContext(ctx).Error(err, "Caching a module blob failed; it will be fetched again", "digest", desc.Digest)
		}
	}
	return data, false, nil
}

// fetchChecked fetches desc from store, at most limit bytes, checked
// against its digest and size.
func fetchChecked(ctx context.Context, store content.Fetcher, desc ocispec.Descriptor, limit int64) ([]byte, error) {
	if desc.Size > limit {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, desc.Size)
	}
	rc, err := store.Fetch(ctx, desc)
	if err != nil {
		return nil, registryError("fetch", err)
	}
	defer rc.Close()
	data, err := readLimited(rc, limit)
	if err != nil {
		return nil, err
	}
	return data, verify(desc, data)
}

// Push uploads a module with its metadata to ref (oci://REGISTRY/REPOSITORY
// or oci://REGISTRY/REPOSITORY:TAG) and returns the artifact, pinned by
// digest. It refuses metadata that does not validate.
func (c *Client) Push(ctx context.Context, ref string, wasm []byte, meta *metadata.Metadata) (*Artifact, error) {
	r, err := ParseReference(ref)
	if err != nil {
		return nil, err
	}
	if meta == nil {
		return nil, fmt.Errorf("push %q: the module has no metadata", ref)
	}
	if err := meta.Validate(); err != nil {
		return nil, fmt.Errorf("push %q: %w", ref, err)
	}
	if int64(len(wasm)) > c.opts.MaxModuleSize {
		return nil, fmt.Errorf("push %q: module %w: %d bytes, the limit is %d", ref, ErrTooLarge, len(wasm), c.opts.MaxModuleSize)
	}
	config, layer, manifest, err := pack(wasm, meta)
	if err != nil {
		return nil, fmt.Errorf("push %q: %w", ref, err)
	}
	if r.Digest != "" && r.Digest != manifest.desc.Digest.String() {
		return nil, fmt.Errorf("push %q: %w: the artifact's manifest is %s", ref, ErrDigestMismatch, manifest.desc.Digest)
	}
	repo, err := c.repository(r)
	if err != nil {
		return nil, fmt.Errorf("push %q: %w", ref, err)
	}
	for _, b := range []blob{config, layer} {
		ok, err := repo.Exists(ctx, b.desc)
		if err == nil && !ok {
			err = repo.Push(ctx, b.desc, bytes.NewReader(b.data))
		}
		if err != nil {
			return nil, fmt.Errorf("push %q: blob %s: %w", ref, b.desc.Digest, registryError("push", err))
		}
	}
	if r.Tag != "" {
		err = repo.PushReference(ctx, manifest.desc, bytes.NewReader(manifest.data), r.Tag)
	} else {
		err = repo.Push(ctx, manifest.desc, bytes.NewReader(manifest.data))
	}
	if err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return nil, fmt.Errorf("push %q: manifest: %w", ref, registryError("push", err))
	}
	ann, _ := Annotations(meta) // pack marshalled them already
	return &Artifact{
		Reference: r.Pinned(manifest.desc.Digest.String()), Tag: r.Tag,
		ManifestDigest: manifest.desc.Digest, WasmDigest: layer.desc.Digest, WasmMediaType: LayerMediaType,
		Annotations: ann, Wasm: wasm, manifest: manifest.data, config: config.data, configDesc: config.desc,
	}, nil
}

func (c *Client) repository(r Reference) (*remote.Repository, error) {
	repo, err := remote.NewRepository(r.Registry + "/" + r.Repository)
	if err != nil {
		return nil, err
	}
	repo.PlainHTTP = c.opts.PlainHTTP || isLoopback(r.Registry)
	// Attaching a signature bundle on a registry without the referrers API
	// rewrites the referrers tag; the index it replaces is left behind
	// rather than deleted, as registries often refuse deletes.
	repo.SkipReferrersGC = true
	client := &auth.Client{Client: c.opts.HTTPClient, Cache: auth.NewCache()}
	if client.Client == nil {
		client.Client = auth.DefaultClient.Client
	}
	if c.cred != nil {
		client.Credential = credentials.Credential(c.cred)
	}
	client.SetUserAgent("wasp")
	repo.Client = client
	return repo, nil
}

func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// registryError names the category of a registry's error response.
func registryError(op string, err error) error {
	if err == nil {
		return nil
	}
	var resp *errcode.ErrorResponse
	if errors.As(err, &resp) {
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%s: %w: %w", op, ErrUnauthorized, err)
		case http.StatusNotFound:
			return fmt.Errorf("%s: %w: %w", op, ErrNotFound, err)
		}
	}
	if errors.Is(err, auth.ErrBasicCredentialNotFound) {
		return fmt.Errorf("%s: %w: no credentials for this registry: %w", op, ErrUnauthorized, err)
	}
	if errors.Is(err, errdef.ErrNotFound) {
		return fmt.Errorf("%s: %w: %w", op, ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
