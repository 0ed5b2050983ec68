// Package snapshot serves Kubernetes objects read from files — a cluster
// snapshot — through a client-go fake clientset, so that wasp's sync loop
// (package proxy) watches them with the very informers, listers and event
// handlers it uses against an apiserver. `wasp run --source PATH` and
// `wasp demo` use it to run the real proxy without a cluster.
//
// A source is a YAML or JSON file, or a directory of them (its *.yaml, *.yml
// and *.json files, not recursively, hidden files skipped), decoded by
// package objects: Nodes, Services and EndpointSlices. Errors name the file,
// the document and the object. An object defined twice, in one file or in
// two, is an error.
//
// With a poll interval, Run checks the files' names, sizes and modification
// times and, when they changed, reads them again and applies the difference
// to the clientset as creates, updates and deletes: the informers see the
// same events an apiserver would send, and the dataplane follows an edited
// Service. A snapshot that fails to read is logged and skipped; the objects
// last read stay served until the files are fixed.
//
// Limits of the fake clientset, none of which the proxy relies on: it does
// not filter watches by label or field selector (the proxy's model applies
// its label selector again, and its Node lister gets the node by name), it
// does not default or validate objects (package objects validates them,
// package model defaults what it needs), and each watch buffers only 100
// events (watch.DefaultChanSize) and panics past that, so the Source waits
// for the watchers to drain while it applies a large change.
package snapshot
