// Package v1alpha1 is wasp's configuration file format, wasp.dev/v1alpha1
// WaspConfiguration: the types as a user writes them, and their defaults.
//
// The shape follows the kube-proxy configuration that KEP-784 plans as
// kubeproxy.config.k8s.io/v1alpha2: generic fields at the root (one
// syncPeriod and minSyncPeriod, detectLocal.clusterCIDRs as a list,
// nodeIPOverride, ipFamilyPolicy, configHardFail), the platform's settings
// under linux and windows, each backend's under its name, plus wasp's own
// modules list. Package config loads, converts and validates it; docs/config.md
// describes every field.
package v1alpha1
