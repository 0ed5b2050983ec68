package v1alpha1

import "k8s.io/apimachinery/pkg/runtime/schema"

// GroupName is the API group of wasp's configuration.
const GroupName = "wasp.dev"

// Kind is the kind of wasp's configuration.
const Kind = "WaspConfiguration"

// SchemeGroupVersion is the group and version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}
