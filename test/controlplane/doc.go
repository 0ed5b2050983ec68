// Package controlplane runs a real Kubernetes control plane (etcd and
// kube-apiserver) on loopback for wasp's end-to-end tests.
//
// Nothing is vendored: [Build] compiles etcd and kube-apiserver from the Go
// module proxy into a cache directory, once, and [Start] runs both for one
// test with freshly generated certificates on free 127.0.0.1 ports. There is
// no kubelet, scheduler or controller-manager: tests create Nodes, Services
// and EndpointSlices themselves, exactly the objects a service proxy watches.
//
// [BuildKubeProxy] builds upstream kube-proxy the same way, on demand, for
// the tests that compare wasp with it.
//
// The first build takes about five minutes and 2-3 GB of Go module and build
// cache, so [Start] skips the test unless WASP_E2E=1 is set. See
// test/README.md.
package controlplane
