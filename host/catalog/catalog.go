// Package catalog is the cluster's catalog of ServiceProxyModule objects
// (wasp.dev/v1alpha1, cluster-scoped) and the choice, for one node, of
// the module each stage runs.
//
// A ServiceProxyModule assigns a module (stage, source, config, limits,
// failure policy, as in the modules section of WaspConfiguration) to the
// nodes its nodeSelector picks (none: every node). For each stage a node
// runs the module of the matching object with the highest priority; equal
// priorities go to the name that sorts first. A canary is an object with
// a higher priority and a selector that picks a few nodes: a module that
// fails there stays there. Objects that do not validate are reported and
// ignored; they never take a stage.
package catalog

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/config"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
)

// The API of ServiceProxyModule.
const (
	Group    = "wasp.dev"
	Version  = "v1alpha1"
	Resource = "serviceproxymodules"
	Kind     = "ServiceProxyModule"
)

// GVR is ServiceProxyModule's resource, for dynamic clients.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// ServiceProxyModule assigns a module to a stage on the nodes its selector
// picks.
type ServiceProxyModule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ServiceProxyModuleSpec   `json:"spec"`
	Status            ServiceProxyModuleStatus `json:"status,omitempty"`
}

// ServiceProxyModuleStatus holds each node's state of the module, written
// by that node's wasp (StatusWriter).
type ServiceProxyModuleStatus struct {
	Nodes []NodeStatus `json:"nodes,omitempty"`
}

// ServiceProxyModuleSpec is a module of WaspConfiguration's modules
// section, with where and how strongly it applies.
type ServiceProxyModuleSpec struct {
	v1alpha1.ModuleConfiguration `json:",inline"`
	// Priority orders the objects that take the same stage on a node:
	// the highest wins. Default 0.
	Priority int32 `json:"priority,omitempty"`
	// NodeSelector picks the nodes the module runs on; none: every node.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// Choice is the module a stage runs on a node, and the object it comes
// from.
type Choice struct {
	Object     string
	Generation int64 // the object's metadata.generation
	Module     v1alpha1.ModuleConfiguration
}

// FromUnstructured converts a ServiceProxyModule read through a dynamic
// client, defaults its module as WaspConfiguration's modules are, and
// validates it: an error names the object and every invalid field.
func FromUnstructured(u *unstructured.Unstructured) (*ServiceProxyModule, error) {
	var m ServiceProxyModule
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &m, true); err != nil {
		return nil, fmt.Errorf("ServiceProxyModule %q: %w", u.GetName(), err)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// validate defaults m's module and checks it through host/config, whose
// field paths it rewrites from modules[0] to spec.
func (m *ServiceProxyModule) validate() error {
	c := &v1alpha1.WaspConfiguration{Modules: []v1alpha1.ModuleConfiguration{m.Spec.ModuleConfiguration}}
	config.Default(c)
	m.Spec.ModuleConfiguration = c.Modules[0]
	var problems []string
	_, errs := config.Validate(c)
	for _, e := range errs {
		if !strings.HasPrefix(e.Field, "modules[0]") {
			continue // the rest of the defaulted configuration is wasp's own
		}
		e.Field = "spec" + strings.TrimPrefix(e.Field, "modules[0]")
		problems = append(problems, e.Error())
	}
	if m.Spec.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(m.Spec.NodeSelector); err != nil {
			problems = append(problems, "spec.nodeSelector: "+err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("ServiceProxyModule %q: %s", m.Name, strings.Join(problems, "; "))
	}
	return nil
}

// Select returns the module each stage runs on a node with nodeLabels,
// from valid objects; stages no object takes are absent.
func Select(objs []*ServiceProxyModule, nodeLabels map[string]string) map[abi.Stage]Choice {
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b *ServiceProxyModule) int {
		if c := cmp.Compare(b.Spec.Priority, a.Spec.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	out := map[abi.Stage]Choice{}
	for _, o := range objs {
		stage, ok := abi.ParseStage(o.Spec.Stage)
		if !ok {
			continue
		}
		if _, taken := out[stage]; taken {
			continue
		}
		if o.Spec.NodeSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(o.Spec.NodeSelector)
			if err != nil || !sel.Matches(labels.Set(nodeLabels)) {
				continue
			}
		}
		out[stage] = Choice{Object: o.Name, Generation: o.Generation, Module: o.Spec.ModuleConfiguration}
	}
	return out
}

// Equal reports whether two choices run the same modules the same way.
func Equal(a, b map[abi.Stage]Choice) bool {
	if len(a) != len(b) {
		return false
	}
	for s, ca := range a {
		cb, ok := b[s]
		if !ok {
			return false
		}
		ja, _ := json.Marshal(ca)
		jb, _ := json.Marshal(cb)
		if string(ja) != string(jb) {
			return false
		}
	}
	return true
}
