// Package config loads wasp's configuration file: its own
// wasp.dev/v1alpha1 WaspConfiguration (package v1alpha1), or kube-proxy's
// kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration converted to it,
// so that wasp can take kube-proxy's ConfigMap as it is.
//
// Load decodes strictly, converts, defaults and validates, and returns
// every problem at once as a field.ErrorList aggregate, each with its field
// path; what it returns is valid or nil, never partly applied. Warnings are
// the fields wasp ignores and the values it deprecates. Marshal writes a
// configuration as YAML in wasp's latest version (wasp run
// --write-config-to). docs/config.md describes every field, the conversion
// and the precedence of flags.
package config
