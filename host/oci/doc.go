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
// Signatures follow either of cosign's layouts: the key-based one
// (SignatureTag, SignatureMediaType, SignatureAnnotation), and Sigstore
// bundles attached as OCI referrers (BundleMediaType), cosign 3's default
// and the only layout of keyless signatures. Sign and SignBundle write
// them with a key, AttachBundle attaches a bundle made elsewhere, Verify
// checks them against SignaturePolicy values (keys, keyless identities
// under a Sigstore trusted root), and a Client with Options.Signatures
// verifies them on every Pull before it fetches or reads any blob of the
// module. The key-based layout is checked with the standard library (a PEM
// key, a SHA-256, one signature); bundles with sigstore-go, the Sigstore
// project's verifier (certificate chains, SCTs, transparency log promises
// and proofs).
package oci
