// Package e2e holds wasp's end-to-end tests: a real kube-apiserver and
// etcd, wasp built from this checkout running in a node's network
// namespace, and real packets from a client namespace and from pods to the
// echo servers behind Services. See test/framework for the environment and
// test/README.md for how to run them (they need root and WASP_E2E=1).
package e2e
