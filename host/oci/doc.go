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
package oci
