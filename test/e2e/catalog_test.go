//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/wasp-proxy/wasp/host/catalog"
	waspruntime "github.com/wasp-proxy/wasp/host/runtime"
	fw "github.com/wasp-proxy/wasp/test/framework"
)

// testServiceProxyModule installs the ServiceProxyModule CRD of deploy/,
// and drives a running wasp's endpoint-selection module through objects:
// created (the 9:1 module takes over, no restart), configured (3:1, then
// a configuration the module rejects: 3:1 stays), pointed at a module
// that does not load (KeepLastGood: 9:1 stays), then with failurePolicy
// Builtin (the builtin module serves: 1:1), then deleted.
func testServiceProxyModule(t *testing.T, s *suite) {
	objs := installServiceProxyModules(t, s)

	heavy := filepath.Join(s.env.Dir, "heavy-catalog.wasm")
	if out, err := exec.CommandContext(s.ctx, s.env.WaspBin, "module", "build", "testdata/heavy", "-o", heavy).CombinedOutput(); err != nil {
		t.Fatalf("build the test module: %v\n%s", err, out)
	}
	broken := filepath.Join(s.env.Dir, "broken.wasm")
	if err := os.WriteFile(broken, []byte("\x00asm\x01\x00\x00\x00 not a module"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The objects name module files: allowed under the test's directory.
	w := s.env.StartWasp(t, "--module-file-directory", s.env.Dir)
	defer w.Stop()
	pid := w.Pid()
	_, spread := heavyService(t, s, "catalog")

	if _, err := objs.Create(s.ctx, serviceProxyModule("heavy", "file://"+heavy), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer objs.Delete(s.ctx, "heavy", metav1.DeleteOptions{})
	fw.Eventually(t, converge, func() error { return spread(0.9) })
	wantStatus(t, s, objs, "heavy", catalog.PhaseActive, waspruntime.Digest(mustRead(t, heavy)), "")

	// The module's configuration: a weight of 3 moves the dataplane to
	// 3:1; a weight the module rejects (wasp_configure) fails the load,
	// and 3:1 stays.
	setSpec(t, s, objs, "heavy", "config", map[string]any{"weight": int64(3)})
	fw.Eventually(t, converge, func() error { return spread(0.75) })
	wantStatus(t, s, objs, "heavy", catalog.PhaseActive, waspruntime.Digest(mustRead(t, heavy)), "")
	setSpec(t, s, objs, "heavy", "config", map[string]any{"weight": int64(0)})
	wantStatus(t, s, objs, "heavy", catalog.PhaseFailed, "", "rejected its configuration: weight: 0 is not in [1, 1000]")
	if err := spread(0.75); err != nil {
		t.Fatalf("KeepLastGood after a rejected configuration: %v", err)
	}
	setSpec(t, s, objs, "heavy", "config", map[string]any{"weight": int64(9)})
	fw.Eventually(t, converge, func() error { return spread(0.9) })

	// A source that does not load: the running module stays.
	setSpec(t, s, objs, "heavy", "source", "file://"+broken)
	fw.Eventually(t, converge, func() error {
		if !strings.Contains(w.Log(), "Loading the ServiceProxyModules' chain failed") {
			return fmt.Errorf("no failed load in wasp's log yet")
		}
		return nil
	})
	if err := spread(0.9); err != nil {
		t.Fatalf("KeepLastGood after a module that does not load: %v", err)
	}
	wantStatus(t, s, objs, "heavy", catalog.PhaseFailed, "", "broken.wasm")

	// failurePolicy Builtin: the builtin module takes the stage back.
	setSpec(t, s, objs, "heavy", "failurePolicy", "Builtin")
	fw.Eventually(t, converge, func() error { return spread(0.5) })
	wantStatus(t, s, objs, "heavy", catalog.PhaseBuiltin, "", "broken.wasm")

	if done, err := w.Exited(); done || w.Pid() != pid {
		t.Fatalf("wasp restarted or exited (%v): module changes must not restart it", err)
	}
}

// wantStatus waits until the proxy node's entry in the object's
// status.nodes has phase, digest (if not "") and a message containing
// message, for the object's current generation.
func wantStatus(t *testing.T, s *suite, objs dynamic.ResourceInterface, name, phase, digest, message string) {
	t.Helper()
	fw.Eventually(t, converge, func() error {
		cur, err := objs.Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		nodes, _, _ := unstructured.NestedSlice(cur.Object, "status", "nodes")
		for _, n := range nodes {
			e, _ := n.(map[string]any)
			if e["node"] != fw.ProxyNode {
				continue
			}
			gen, _ := e["observedGeneration"].(int64)
			if e["phase"] != phase || (digest != "" && e["digest"] != digest) ||
				!strings.Contains(fmt.Sprint(e["message"]), message) || gen != cur.GetGeneration() {
				return fmt.Errorf("status entry of %s: %v; want phase %s, digest %q, a message with %q, generation %d",
					fw.ProxyNode, e, phase, digest, message, cur.GetGeneration())
			}
			return nil
		}
		return fmt.Errorf("no status entry of %s in %v", fw.ProxyNode, nodes)
	})
}

// installServiceProxyModules installs the ServiceProxyModule CRD of
// deploy/ and the RBAC wasp needs to read the objects, and returns the
// client of the objects.
func installServiceProxyModules(t *testing.T, s *suite) dynamic.ResourceInterface {
	t.Helper()
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal(mustRead(t, "../../deploy/base/crd.yaml"), &crd.Object); err != nil {
		t.Fatal(err)
	}
	if err := s.env.Apply(s.ctx, "e2e", &crd); err != nil {
		t.Fatal(err)
	}
	fw.Eventually(t, converge, func() error {
		_, err := s.env.Client.Discovery().ServerResourcesForGroupVersion(catalog.Group + "/" + catalog.Version)
		return err
	})

	// wasp runs as system:kube-proxy here: let it read the objects, as
	// deploy/'s role lets the wasp ServiceAccount.
	rbac := s.env.Client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(s.ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-serviceproxymodules"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{catalog.Group}, Resources: []string{catalog.Resource}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{catalog.Group}, Resources: []string{catalog.Resource + "/status"}, Verbs: []string{"patch"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(s.ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-serviceproxymodules"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-serviceproxymodules"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:kube-proxy"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(s.env.CP.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(catalog.GVR)
}

// serviceProxyModule is a ServiceProxyModule object that gives the
// endpoint-selection stage of the proxy node to source.
func serviceProxyModule(name, source string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": catalog.Group + "/" + catalog.Version, "kind": catalog.Kind,
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"stage": "endpoint-selection", "source": source,
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": fw.ProxyNode}}},
	}}
}

// setSpec sets spec.KEY of the object name to value.
func setSpec(t *testing.T, s *suite, objs dynamic.ResourceInterface, name, key string, value any) {
	t.Helper()
	// wasp writes the object's status meanwhile: read and update again
	// when the update loses that race.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := objs.Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(cur.Object, value, "spec", key); err != nil {
			return err
		}
		_, err = objs.Update(s.ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
