// Package framework runs wasp end to end on one machine with real parts: a
// real etcd and kube-apiserver on loopback (package controlplane), a
// netlab cluster of network namespaces (nodes with pods answering echo
// requests with their names, and a client), and the wasp binary built from
// this checkout, running inside node-a's namespace and reaching the
// apiserver through a loopback forwarder there — exactly as it would run
// as a DaemonSet pod with hostNetwork.
//
// An Env is built once per test binary run (it takes a few seconds once the
// control plane binaries are built) and scenarios share it, each in its own
// Kubernetes namespace. Helpers create Nodes, Services and EndpointSlices
// the way the endpointslice controller would, since the control plane runs
// no controllers.
package framework
