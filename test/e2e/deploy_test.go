//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	fw "github.com/wasp-proxy/wasp/test/framework"
)

// The example overlay is what a cluster applies, with the lab's pod
// ranges; it includes deploy/base.
var deployDir = filepath.Join("..", "..", "deploy", "overlays", "example")

// TestDeploy applies deploy's manifests to a real apiserver, every object
// for real with strict field validation, then runs wasp as the DaemonSet
// does (its init container's and proxy container's arguments, the
// configuration of its ConfigMap) with exactly the role they grant: as the
// wasp ServiceAccount, with a token minted for it.
func TestDeploy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	env := fw.Setup(ctx, t)
	s := &suite{env: env, ctx: ctx}

	objs, err := fw.Kustomize(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Apply(ctx, "wasp-e2e", objs...); err != nil {
		t.Fatal(err)
	}
	ds, err := env.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "wasp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkReferences(t, s, ds)

	kubeconfig, saConfig, err := env.ServiceAccountKubeconfig(ctx, ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the roles allow what wasp does and nothing else", func(t *testing.T) { testRole(t, s, saConfig) })
	t.Run("wasp runs as the DaemonSet runs it", func(t *testing.T) { testRunAsServiceAccount(t, s, ds, kubeconfig) })
}

// checkReferences checks that what the DaemonSet's pods would need exists
// in its namespace: its ServiceAccount and every ConfigMap it names. A
// kustomize name reference that was not rewritten (a generated name with
// its hash) shows up here.
func checkReferences(t *testing.T, s *suite, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if _, err := s.env.Client.CoreV1().ServiceAccounts(ds.Namespace).Get(s.ctx, spec.ServiceAccountName, metav1.GetOptions{}); err != nil {
		t.Errorf("DaemonSet %s: serviceAccountName: %v", ds.Name, err)
	}
	var configMaps []string
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			configMaps = append(configMaps, v.ConfigMap.Name)
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef != nil {
				configMaps = append(configMaps, from.ConfigMapRef.Name)
			}
		}
	}
	if len(configMaps) == 0 {
		t.Errorf("DaemonSet %s names no ConfigMap", ds.Name)
	}
	for _, name := range configMaps {
		if _, err := s.env.Client.CoreV1().ConfigMaps(ds.Namespace).Get(s.ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("DaemonSet %s: ConfigMap: %v", ds.Name, err)
		}
	}
}

// testRole asks the apiserver, with the ServiceAccount's own token, what
// it may do: the reads of wasp's informers and its Node's Events, and no
// other write, nor any secret.
func testRole(t *testing.T, s *suite, cfg *rest.Config) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type access = authorizationv1.ResourceAttributes
	for _, tc := range []struct {
		access
		allowed bool
	}{
		{access{Verb: "list", Resource: "services"}, true},
		{access{Verb: "watch", Resource: "services"}, true},
		{access{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices"}, true},
		{access{Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices"}, true},
		{access{Verb: "list", Group: "networking.k8s.io", Resource: "servicecidrs"}, true},
		{access{Verb: "watch", Group: "networking.k8s.io", Resource: "servicecidrs"}, true},
		{access{Verb: "get", Resource: "nodes", Name: fw.ProxyNode}, true},
		{access{Verb: "list", Resource: "nodes"}, true},
		{access{Verb: "watch", Resource: "nodes"}, true},

		{access{Verb: "list", Resource: "secrets"}, false},
		{access{Verb: "get", Resource: "secrets", Namespace: "kube-system"}, false},
		{access{Verb: "list", Resource: "configmaps", Namespace: "kube-system"}, false},
		{access{Verb: "list", Resource: "pods"}, false},
		{access{Verb: "get", Resource: "services", Namespace: "default", Name: "kubernetes"}, false},
		{access{Verb: "update", Resource: "services", Namespace: "default"}, false},
		{access{Verb: "patch", Resource: "services", Subresource: "status", Namespace: "default"}, false},
		{access{Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"}, false},
		{access{Verb: "delete", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"}, false},
		{access{Verb: "patch", Resource: "nodes", Name: fw.ProxyNode}, false},
		{access{Verb: "update", Resource: "nodes", Subresource: "status", Name: fw.ProxyNode}, false},
		{access{Verb: "list", Group: "wasp.dev", Resource: "serviceproxymodules"}, true},
		{access{Verb: "watch", Group: "wasp.dev", Resource: "serviceproxymodules"}, true},
		{access{Verb: "update", Group: "wasp.dev", Resource: "serviceproxymodules"}, false},
		{access{Verb: "patch", Group: "wasp.dev", Resource: "serviceproxymodules", Subresource: "status"}, true},
		{access{Verb: "patch", Group: "wasp.dev", Resource: "serviceproxymodules"}, false},
		{access{Verb: "create", Group: "networking.k8s.io", Resource: "servicecidrs"}, false},
		// Events about its Node, which are in default.
		{access{Verb: "create", Resource: "events", Namespace: "default"}, true},
		{access{Verb: "patch", Resource: "events", Namespace: "default"}, true},
		{access{Verb: "create", Resource: "events", Namespace: "kube-system"}, false},
		{access{Verb: "update", Resource: "events", Namespace: "default"}, false},
		{access{Verb: "delete", Resource: "events", Namespace: "default"}, false},
		{access{Verb: "list", Resource: "events", Namespace: "default"}, false},
		{access{Verb: "create", Group: "events.k8s.io", Resource: "events", Namespace: "default"}, false},
		{access{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "kube-system", Name: "wasp"}, false},
		{access{Verb: "impersonate", Resource: "users"}, false},
		{access{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, false},
	} {
		name := tc.Verb + " " + strings.Trim(tc.Group+"/"+tc.Resource+"/"+tc.Subresource, "/")
		review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(s.ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &tc.access},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if review.Status.Allowed != tc.allowed {
			t.Errorf("%s (namespace %q, name %q): allowed %v, want %v (%s)",
				name, tc.Namespace, tc.Name, review.Status.Allowed, tc.allowed, review.Status.Reason)
		}
	}
}

// testRunAsServiceAccount runs wasp as the DaemonSet does, in the proxy
// node: first its init container's command, then its proxy container's,
// with the applied configuration; and checks that wasp programs a Service
// with the ServiceAccount's token, and that the apiserver refused it
// nothing along the way.
func testRunAsServiceAccount(t *testing.T, s *suite, ds *appsv1.DaemonSet, kubeconfig string) {
	spec := ds.Spec.Template.Spec
	config := labConfig(t, s, ds, kubeconfig)
	initArgs := podArgs(t, s, container(t, spec.InitContainers, "node-setup"), config)
	if out, err := s.env.RunWasp(s.ctx, initArgs...); err != nil {
		t.Fatalf("the init container's wasp %q: %v\n%s", initArgs, err, out)
	}
	args := append(podArgs(t, s, container(t, spec.Containers, "wasp"), config), "-v", "2")
	w := s.env.StartProcess(t, s.env.ProxyNS(), s.env.WaspBin, args...)

	ns := s.namespace(t)
	svc := s.env.CreateService(s.ctx, t, fw.ServiceSpec{Name: "deployed", Namespace: ns, DualStack: true})
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv4Protocol, fw.Ready("a-1", "b-1")...)
	s.env.SetEndpoints(s.ctx, t, svc, v1.IPv6Protocol, fw.Ready("a-2")...)
	s.waitFor(t, s.client(), "tcp", fw.ClusterIP(t, svc, v1.IPv4Protocol), 80, "a-1", "b-1")
	s.waitFor(t, s.client(), "tcp", fw.ClusterIP(t, svc, v1.IPv6Protocol), 80, "a-2")

	w.Stop()
	if log := w.Log(); strings.Contains(log, "forbidden") {
		t.Errorf("the apiserver refused wasp something its role should grant:\n%s", log)
	}
}

// labConfig writes the configuration of the applied wasp-config
// ConfigMap, as the pod would mount it, to a file, with what the lab
// needs instead of a pod's: the ServiceAccount's kubeconfig for the
// in-cluster client (there is no pod token file here), and
// nf_conntrack_max left alone (linux.conntrack.maxPerCore 0), because the
// node set-up can raise the global limits only from the host's initial
// network namespace, and the lab's node is another one.
func labConfig(t *testing.T, s *suite, ds *appsv1.DaemonSet, kubeconfig string) string {
	t.Helper()
	var name string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && strings.HasPrefix(v.ConfigMap.Name, "wasp-config") {
			name = v.ConfigMap.Name
		}
	}
	cm, err := s.env.Client.CoreV1().ConfigMaps(ds.Namespace).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the DaemonSet's wasp-config: %v", err)
	}
	var c map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &c); err != nil {
		t.Fatalf("ConfigMap %s config.yaml: %v", cm.Name, err)
	}
	c["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
	linux, _ := c["linux"].(map[string]any)
	if linux == nil {
		linux = map[string]any{}
	}
	conntrack, _ := linux["conntrack"].(map[string]any)
	if conntrack == nil {
		conntrack = map[string]any{}
	}
	conntrack["maxPerCore"] = 0
	linux["conntrack"], c["linux"] = conntrack, linux
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.env.Dir, "config.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// podArgs returns c's arguments as the kubelet would pass them on the
// proxy node, with the configuration at config and the module cache in
// the test's directory. It fails t if c does not read its configuration
// where the ConfigMap is mounted.
func podArgs(t *testing.T, s *suite, c *v1.Container, config string) []string {
	t.Helper()
	var mount string
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(m.Name, "config") {
			mount = m.MountPath
		}
	}
	args := slices.Clone(c.Args)
	found := false
	for i, a := range args {
		switch {
		case mount != "" && a == "--config="+mount+"/config.yaml":
			args[i], found = "--config="+config, true
		case strings.HasPrefix(a, "--cache-dir="):
			args[i] = "--cache-dir=" + filepath.Join(s.env.Dir, "cache")
		}
		args[i] = strings.ReplaceAll(args[i], "$(NODE_NAME)", fw.ProxyNode)
	}
	if !found {
		t.Fatalf("container %s: args %q do not read the configuration mounted at %q", c.Name, c.Args, mount)
	}
	return args
}

// container returns the container called name of cs.
func container(t *testing.T, cs []v1.Container, name string) *v1.Container {
	t.Helper()
	i := slices.IndexFunc(cs, func(c v1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("the DaemonSet has no container %q", name)
	}
	return &cs[i]
}
