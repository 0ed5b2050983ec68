// Package oci pulls and pushes wasp modules as OCI artifacts.
//
// An artifact follows the CNCF Wasm artifact layout: an image manifest whose
// config has media type ConfigMediaType and whose single layer is the module,
// LayerMediaType. The module's metadata (name, version, ABI, stages) is copied
// into the manifest's annotations, so a registry client can show it without
// downloading the module. Layers of the older Kubewarden and Istio media types
// are accepted on read.
//
// A reference is oci://REGISTRY/REPOSITORY@sha256:DIGEST. A tag
// (oci://REGISTRY/REPOSITORY:TAG) is refused unless Options.AllowTags is set;
// then it is resolved once and the digest it resolved to is returned. The
// manifest and every blob are checked against their digests and a size cap.
//
// A Client with a CacheDir keeps manifests and blobs by digest on the node
// (CacheDir/blobs/sha256/HEX), checked on every read: a digest is pulled once
// per node, and a digest-pinned reference is served from the cache while its
// registry is down.
//
// Signatures follow cosign's key-based layout (SignatureTag,
// SignatureMediaType, SignatureAnnotation): Sign writes one, Verify checks
// them, and a Client with Options.PublicKeys verifies them on every Pull
// before it fetches or reads any blob of the module. They are implemented
// with the standard library's crypto rather than sigstore's Go modules: the
// checks are a PEM key, a SHA-256 and one signature verification, and
// sigstore's modules bring a second registry client (go-containerregistry)
// and protobuf code into the build.
package oci
