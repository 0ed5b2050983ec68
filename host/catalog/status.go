package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/wasp-proxy/wasp/internal/printable"
)

// Phases of a module on a node, in a ServiceProxyModule's status.
const (
	// PhaseActive: the node runs the object's module.
	PhaseActive = "Active"
	// PhaseFailed: the module did not load on the node; the node keeps
	// the modules it ran (failure policy KeepLastGood).
	PhaseFailed = "Failed"
	// PhaseBuiltin: the module did not load on the node, which runs its
	// configured or builtin module for the stage (failure policy Builtin).
	PhaseBuiltin = "Builtin"
)

// NodeStatus is one node's entry in a ServiceProxyModule's
// status.nodes.
type NodeStatus struct {
	Node               string `json:"node"`
	Phase              string `json:"phase"`
	Digest             string `json:"digest,omitempty"`
	Message            string `json:"message,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastUpdateTime     string `json:"lastUpdateTime,omitempty"`
}

// StatusWriter writes this node's entry of the objects' status.nodes with
// server-side apply, as its own field manager: status.nodes is a map
// keyed by node, so thousands of nodes write one object without
// conflicts, and each only ever touches its own entry.
type StatusWriter struct {
	Dynamic  dynamic.Interface
	NodeName string
}

// Set applies st as this node's entry of object's status; a nil st
// removes the entry.
func (w StatusWriter) Set(ctx context.Context, object string, st *NodeStatus) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/" + Version, "kind": Kind,
		"metadata": map[string]any{"name": object},
	}}
	if st != nil {
		u.Object["status"] = map[string]any{"nodes": []any{statusEntry(*st, w.NodeName)}}
	}
	_, err := w.Dynamic.Resource(GVR).ApplyStatus(ctx, object, u, metav1.ApplyOptions{FieldManager: "wasp/" + w.NodeName, Force: true})
	if err != nil {
		return fmt.Errorf("status of ServiceProxyModule %q: %w", object, err)
	}
	return nil
}

// statusEntry is e as node's entry of status.nodes. The message may
// quote a module (its stderr, its rejection of its configuration): it is
// escaped for the terminals that show it.
func statusEntry(e NodeStatus, node string) map[string]any {
	e.Node = node
	if e.LastUpdateTime == "" {
		e.LastUpdateTime = time.Now().UTC().Format(time.RFC3339)
	}
	entry := map[string]any{"node": e.Node, "phase": e.Phase, "lastUpdateTime": e.LastUpdateTime}
	if e.Digest != "" {
		entry["digest"] = e.Digest
	}
	if e.Message != "" {
		entry["message"] = truncate(printable.String(e.Message), maxStatusMessage)
	}
	if e.ObservedGeneration != 0 {
		entry["observedGeneration"] = e.ObservedGeneration
	}
	return entry
}

// maxStatusMessage bounds a status entry's message, as an Event's.
const maxStatusMessage = 1024

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
