// Package objects reads Kubernetes Nodes, Services and EndpointSlices from
// YAML or JSON, for `wasp explain -f FILE` and file-based sources.
//
// Decode accepts what people have at hand: multi-document YAML (`---`),
// a JSON object or concatenated JSON objects, and lists as
// `kubectl get -o yaml` prints them (`kind: List` with items, or a typed
// ServiceList, NodeList or EndpointSliceList whose items may omit kind and
// apiVersion). It accepts only v1 Node, v1 Service and discovery.k8s.io/v1
// EndpointSlice.
//
// Decoding is strict: unknown and duplicate fields, values of the wrong
// type, missing names and EndpointSlices without the
// kubernetes.io/service-name label are errors, each an *Error naming the
// source, the document (counted from 1, empty documents not counted), the
// item inside a List, the object and the field. A file that explains a
// cluster should not be silently misread; the price is that fields newer
// than this build's Kubernetes API types are rejected too.
//
// Objects are not defaulted as the apiserver would (the model package
// applies the defaults it needs), except that a Service or EndpointSlice
// without a namespace gets "default", as `kubectl apply` would give it.
package objects
