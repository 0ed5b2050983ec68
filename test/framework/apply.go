//go:build linux

package framework

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Kustomize renders the kustomization in dir, as kubectl apply -k would,
// and returns its objects in kustomize's order (namespaces, RBAC and
// ConfigMaps before the workloads that use them).
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}

// Apply creates or updates objs, in order, with server-side apply as the
// cluster administrator, the way kubectl apply --server-side does, but
// with strict field validation: an unknown or duplicate field is an error,
// not a warning. Each error names its object.
func (e *Env) Apply(ctx context.Context, fieldManager string, objs ...*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(e.CP.RESTConfig)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(e.Client.Discovery()))
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		what := fmt.Sprintf("%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName())
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("apply %s: %w", what, err)
		}
		body, err := obj.MarshalJSON()
		if err != nil {
			return fmt.Errorf("apply %s: %w", what, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true), FieldValidation: "Strict"})
		if err != nil {
			return fmt.Errorf("apply %s: %w", what, err)
		}
	}
	return nil
}
