// Package ocitest is an in-process registry that speaks just enough of the
// OCI distribution API for tests to push and pull module artifacts, and to
// misbehave on purpose: serve other content under a digest, require
// credentials, go down.
package ocitest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
)

// Registry is a fake registry. Repositories share one blob store.
type Registry struct {
	// Host is host:port, for references: oci://HOST/REPOSITORY.
	Host string

	srv      *httptest.Server
	mu       sync.Mutex
	content  map[digest.Digest][]byte
	types    map[digest.Digest]string // media types of manifests
	tags     map[string]digest.Digest // REPOSITORY:TAG
	served   map[digest.Digest][]byte // served instead of content
	user     string
	password string
	requests int
}

// New starts a registry on loopback, closed at the end of the test.
func New(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{
		content: map[digest.Digest][]byte{},
		types:   map[digest.Digest]string{},
		tags:    map[string]digest.Digest{},
		served:  map[digest.Digest][]byte{},
	}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// Close stops the registry: every request fails from now on.
func (r *Registry) Close() { r.srv.Close() }

// RequireBasicAuth makes every request need these credentials.
func (r *Registry) RequireBasicAuth(user, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user, r.password = user, password
}

// Serve makes the registry answer requests for digest d with data.
func (r *Registry) Serve(d digest.Digest, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.served[d] = data
}

// Put stores content; mediaType is set for manifests, "" for blobs. It
// returns the content's digest.
func (r *Registry) Put(mediaType string, data []byte) digest.Digest {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := digest.FromBytes(data)
	r.content[d] = data
	if mediaType != "" {
		r.types[d] = mediaType
	}
	return d
}

// Delete removes content.
func (r *Registry) Delete(d digest.Digest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.content, d)
}

// Get returns stored content.
func (r *Registry) Get(d digest.Digest) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.content[d]
}

// Tag points repository:tag at a manifest.
func (r *Registry) Tag(repository, tag string, d digest.Digest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tags[repository+":"+tag] = d
}

// Resolve returns the manifest repository:tag points at, "" if none.
func (r *Registry) Resolve(repository, tag string) digest.Digest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tags[repository+":"+tag]
}

// Requests returns how many requests the registry has answered, /v2/
// pings included.
func (r *Registry) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if r.user != "" {
		if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.password {
			w.Header().Set("WWW-Authenticate", `Basic realm="ocitest"`)
			writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
			return
		}
	}
	path := strings.TrimPrefix(req.URL.Path, "/v2/")
	if path == "" {
		return
	}
	switch {
	case strings.Contains(path, "/referrers/"):
		// No referrers API, as the distribution registry: clients fall
		// back to the referrers tag (sha256-HEX).
		http.NotFound(w, req)
	case strings.Contains(path, "/blobs/uploads/"):
		repo, id, _ := strings.Cut(path, "/blobs/uploads/")
		r.upload(w, req, repo, id)
	case strings.Contains(path, "/manifests/"):
		repo, ref, _ := strings.Cut(path, "/manifests/")
		r.manifest(w, req, repo, ref)
	case strings.Contains(path, "/blobs/"):
		_, ref, _ := strings.Cut(path, "/blobs/")
		r.send(w, req, digest.Digest(ref), "application/octet-stream")
	default:
		writeError(w, http.StatusNotFound, "NAME_UNKNOWN", path)
	}
}

func (r *Registry) upload(w http.ResponseWriter, req *http.Request, repo, id string) {
	switch req.Method {
	case http.MethodPost:
		if d := req.URL.Query().Get("digest"); d != "" {
			r.store(w, req, repo, digest.Digest(d))
			return
		}
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		w.Header().Set("Location", "/v2/"+repo+"/blobs/uploads/"+hex.EncodeToString(b))
		w.WriteHeader(http.StatusAccepted)
	case http.MethodPut:
		r.store(w, req, repo, digest.Digest(req.URL.Query().Get("digest")))
	default:
		writeError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", req.Method)
	}
}

func (r *Registry) store(w http.ResponseWriter, req *http.Request, repo string, d digest.Digest) {
	data, err := io.ReadAll(req.Body)
	if err != nil || d.Validate() != nil || digest.FromBytes(data) != d {
		writeError(w, http.StatusBadRequest, "DIGEST_INVALID", string(d))
		return
	}
	r.content[d] = data
	w.Header().Set("Location", "/v2/"+repo+"/blobs/"+d.String())
	w.Header().Set("Docker-Content-Digest", d.String())
	w.WriteHeader(http.StatusCreated)
}

func (r *Registry) manifest(w http.ResponseWriter, req *http.Request, repo, ref string) {
	if req.Method == http.MethodPut {
		data, err := io.ReadAll(req.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "MANIFEST_INVALID", err.Error())
			return
		}
		d := digest.FromBytes(data)
		r.content[d], r.types[d] = data, req.Header.Get("Content-Type")
		if _, err := digest.Parse(ref); err != nil {
			r.tags[repo+":"+ref] = d
		}
		w.Header().Set("Location", "/v2/"+repo+"/manifests/"+d.String())
		w.Header().Set("Docker-Content-Digest", d.String())
		w.WriteHeader(http.StatusCreated)
		return
	}
	d, err := digest.Parse(ref)
	if err != nil {
		var ok bool
		if d, ok = r.tags[repo+":"+ref]; !ok {
			writeError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", ref)
			return
		}
	}
	r.send(w, req, d, r.types[d])
}

func (r *Registry) send(w http.ResponseWriter, req *http.Request, d digest.Digest, mediaType string) {
	data, ok := r.content[d]
	if s, tampered := r.served[d]; tampered {
		data, ok = s, true
	}
	if !ok {
		writeError(w, http.StatusNotFound, "BLOB_UNKNOWN", d.String())
		return
	}
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Docker-Content-Digest", d.String())
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if req.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(data)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}
