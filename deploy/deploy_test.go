// Package deploy holds the kustomize manifests of wasp's DaemonSet (base/,
// overlays/, components/). Its tests catch drift between the manifests, the
// Dockerfile and the code they describe; test/e2e applies the manifests to a
// real apiserver and runs wasp with the role they grant.
package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/wasp-proxy/wasp/host/config"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/runtime"
)

// Paths the manifests and the image agree on.
const (
	binary     = "/usr/local/bin/wasp" // the Dockerfile's entrypoint, the DaemonSet's command
	configDir  = "/etc/wasp"           // where the wasp-config ConfigMap is mounted
	configFile = configDir + "/config.yaml"
	image      = "ghcr.io/wasp-proxy/wasp"
)

// decodeAll decodes every YAML document of path strictly, in order, into
// the values next returns; unknown fields are errors, as a typo in a
// manifest should be.
func decodeAll(t *testing.T, path string, next func(i int) any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		js, err := yaml.ToJSON(doc)
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(next(i)); err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
	}
}

func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	decodeAll(t, filepath.Join("base", "daemonset.yaml"), func(int) any { return &ds })
	return &ds
}

func container(t *testing.T, cs []v1.Container, name string) *v1.Container {
	t.Helper()
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// TestRoles holds the roles to what wasp does: the reads of host/proxy's
// informers and cmd/wasp's Node get, cluster-wide, and host/events' Node
// Events, in default only. A new rule must be added here too,
// deliberately.
func TestRoles(t *testing.T) {
	var (
		role          rbacv1.ClusterRole
		binding       rbacv1.ClusterRoleBinding
		events        rbacv1.Role
		eventsBinding rbacv1.RoleBinding
	)
	docs := []any{&role, &binding, &events, &eventsBinding}
	decodeAll(t, filepath.Join("base", "rbac.yaml"), func(i int) any {
		if i >= len(docs) {
			t.Fatalf("rbac.yaml: more than %d documents", len(docs))
		}
		return docs[i]
	})
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"wasp.dev"}, Resources: []string{"serviceproxymodules"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"wasp.dev"}, Resources: []string{"serviceproxymodules/status"}, Verbs: []string{"patch"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole %s rules:\n got %+v\nwant %+v", role.Name, role.Rules, want)
	}
	// client-go's recorder creates an Event, then patches it when it
	// repeats; a Node's Events are in default.
	wantEvents := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}
	if events.Namespace != "default" || !reflect.DeepEqual(events.Rules, wantEvents) {
		t.Errorf("Role %s/%s rules %+v; want default, %+v", events.Namespace, events.Name, events.Rules, wantEvents)
	}
	wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: "wasp", Namespace: "kube-system"}
	for _, b := range []struct {
		kind, ref, want string
		subjects        []rbacv1.Subject
	}{
		{"ClusterRoleBinding", binding.RoleRef.Name, role.Name, binding.Subjects},
		{"RoleBinding", eventsBinding.RoleRef.Name, events.Name, eventsBinding.Subjects},
	} {
		if b.ref != b.want || !reflect.DeepEqual(b.subjects, []rbacv1.Subject{wantSubject}) {
			t.Errorf("%s binds %q to %+v, want %q to %+v", b.kind, b.ref, b.subjects, b.want, wantSubject)
		}
	}
	if eventsBinding.Namespace != events.Namespace {
		t.Errorf("RoleBinding in %q, Role in %q", eventsBinding.Namespace, events.Namespace)
	}
}

// TestDaemonSet checks the settings a kube-proxy replacement cannot do
// without, and that the DaemonSet, the image and the configuration agree.
func TestDaemonSet(t *testing.T) {
	ds := daemonSet(t)
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" || spec.ServiceAccountName != "wasp" {
		t.Errorf("hostNetwork %v, priorityClassName %q, serviceAccountName %q: want true, system-node-critical, wasp",
			spec.HostNetwork, spec.PriorityClassName, spec.ServiceAccountName)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl v1.Toleration) bool {
		return tl.Operator == v1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("tolerations %+v: want one that tolerates every taint", spec.Tolerations)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("updateStrategy %q, want RollingUpdate", ds.Spec.UpdateStrategy.Type)
	}

	// The config volume is the wasp-config ConfigMap, mounted where both
	// containers read it.
	var configVolume string
	for _, vol := range spec.Volumes {
		if vol.ConfigMap != nil && vol.ConfigMap.Name == "wasp-config" {
			configVolume = vol.Name
		}
	}
	if configVolume == "" {
		t.Fatal("no volume of the wasp-config ConfigMap")
	}

	initc := container(t, spec.InitContainers, "node-setup")
	main := container(t, spec.Containers, "wasp")
	wantInit := []string{"run", "--init-only", "--config=" + configFile}
	if !reflect.DeepEqual(initc.Args, wantInit) || initc.SecurityContext == nil || initc.SecurityContext.Privileged == nil || !*initc.SecurityContext.Privileged {
		t.Errorf("init container: args %q, securityContext %+v; want %q, privileged", initc.Args, initc.SecurityContext, wantInit)
	}
	for _, c := range []*v1.Container{initc, main} {
		if !reflect.DeepEqual(c.Command, []string{binary}) {
			t.Errorf("container %s: command %q, want the image's binary %s", c.Name, c.Command, binary)
		}
		if want := image + ":" + runtime.HostVersion; c.Image != want {
			t.Errorf("container %s: image %s, want %s (this wasp's version)", c.Name, c.Image, want)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m v1.VolumeMount) bool {
			return m.Name == configVolume && m.MountPath == configDir && m.ReadOnly
		}) {
			t.Errorf("container %s: the configuration is not mounted read-only at %s", c.Name, configDir)
		}
	}

	if !slices.Contains(main.Args, "--config="+configFile) || !slices.Contains(main.Args, "--hostname-override=$(NODE_NAME)") {
		t.Errorf("wasp args %q: want --config=%s and --hostname-override=$(NODE_NAME)", main.Args, configFile)
	}
	if !slices.ContainsFunc(main.Env, func(e v1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Error("wasp: no NODE_NAME from spec.nodeName")
	}
	sc := main.SecurityContext
	switch {
	case sc == nil || sc.Capabilities == nil:
		t.Fatal("wasp: no securityContext capabilities")
	case !reflect.DeepEqual(sc.Capabilities.Drop, []v1.Capability{"ALL"}) || !reflect.DeepEqual(sc.Capabilities.Add, []v1.Capability{"NET_ADMIN", "NET_RAW"}):
		t.Errorf("wasp capabilities: drop %v add %v; want drop ALL, add NET_ADMIN and NET_RAW (iptables-legacy)", sc.Capabilities.Drop, sc.Capabilities.Add)
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("wasp runs privileged")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("wasp: root file system not read-only")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("wasp: privilege escalation allowed")
	}

	// The probes reach the health server where the configuration puts it.
	port := healthzPort(t, filepath.Join("base", "config.yaml"))
	for _, p := range []struct {
		name  string
		probe *v1.Probe
		path  string
	}{{"startup", main.StartupProbe, "/livez"}, {"liveness", main.LivenessProbe, "/livez"}, {"readiness", main.ReadinessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Errorf("wasp: %s probe %+v, want an HTTP GET of %s", p.name, p.probe, p.path)
			continue
		}
		named := p.probe.HTTPGet.Port.StrVal
		if !slices.ContainsFunc(main.Ports, func(cp v1.ContainerPort) bool {
			return cp.Name == named && cp.ContainerPort == port
		}) {
			t.Errorf("wasp: %s probe port %q is not the healthz port %d", p.name, named, port)
		}
	}
}

// loadConfig loads the configuration at path as wasp run --config does:
// strictly, defaulted and validated. A warning fails t too: a shipped
// configuration should have none.
func loadConfig(t *testing.T, path string) *v1alpha1.WaspConfiguration {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, warnings, err := config.Load(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(warnings) > 0 {
		t.Errorf("%s: warnings: %q", path, warnings)
	}
	return c
}

// TestConfig loads the configurations the kustomizations ship, and checks
// what the DaemonSet relies on.
func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		cluster    bool // an overlay's: the pod ranges are set
	}{
		{"base", filepath.Join("base", "config.yaml"), false},
		{"example overlay", filepath.Join("overlays", "example", "config.yaml"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loadConfig(t, tc.path)
			if c.Mode != v1alpha1.ProxyModeNFTables {
				t.Errorf("mode %q, want nftables", c.Mode)
			}
			// In-cluster: the ServiceAccount's token, the apiserver
			// from wasp-apiserver.
			if c.ClientConnection.Kubeconfig != "" {
				t.Errorf("clientConnection.kubeconfig %q: the pod has no such file; want in-cluster", c.ClientConnection.Kubeconfig)
			}
			// The kubelet gives a system-node-critical pod -997; lower
			// takes CAP_SYS_RESOURCE, which the container lacks.
			if adj := *c.Linux.OOMScoreAdj; adj < -997 {
				t.Errorf("linux.oomScoreAdj %d: below -997 needs CAP_SYS_RESOURCE", adj)
			}
			if tc.cluster && len(c.DetectLocal.ClusterCIDRs) == 0 {
				t.Error("detectLocal.clusterCIDRs: empty")
			}
		})
	}
}

// healthzPort returns the port of the configuration's healthzBindAddress.
func healthzPort(t *testing.T, path string) int32 {
	t.Helper()
	c := loadConfig(t, path)
	if c.HealthzBindAddress == nil || *c.HealthzBindAddress == "" {
		t.Fatalf("%s: no health server", path)
	}
	_, port, err := net.SplitHostPort(*c.HealthzBindAddress)
	if err != nil {
		t.Fatalf("%s: healthzBindAddress: %v", path, err)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatalf("%s: healthzBindAddress port: %v", path, err)
	}
	return int32(n)
}

// dockerfile is the Dockerfile's instructions, continuation lines joined,
// comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	cur := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && cur == "") {
			continue
		}
		cur += line
		if strings.HasSuffix(cur, `\`) {
			cur = strings.TrimSuffix(cur, `\`) + " "
			continue
		}
		if cur != "" {
			out = append(out, cur)
		}
		cur = ""
	}
	return out
}

// goModVersion returns the Go version go.mod builds with: its toolchain
// line, else its go line.
func goModVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^toolchain go(\S+)`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	m := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod: no go line")
	}
	return string(m[1])
}

// TestDockerfile checks what the image must get right: go.mod's Go, a
// static trimmed build of cmd/wasp, the iptables tools, and the binary
// where the DaemonSet runs it.
func TestDockerfile(t *testing.T) {
	instrs := dockerfile(t)
	var (
		froms      []string
		build      string
		copyDest   string
		entrypoint []string
		installs   string // the final stage's RUN instructions
	)
	for _, in := range instrs {
		word, rest, _ := strings.Cut(in, " ")
		switch strings.ToUpper(word) {
		case "FROM":
			froms = append(froms, rest)
			copyDest, entrypoint, installs = "", nil, "" // what counts is the last stage's
		case "RUN":
			if strings.Contains(rest, "go build") {
				build = rest
			}
			installs += rest + "\n"
		case "COPY":
			if f := strings.Fields(rest); strings.HasPrefix(rest, "--from=") && len(f) == 3 {
				copyDest = f[2]
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &entrypoint); err != nil {
				t.Errorf("ENTRYPOINT %s: want the exec (JSON) form: %v", rest, err)
			}
		}
	}
	if len(froms) < 2 {
		t.Fatalf("FROM %q: want a build stage and a final stage", froms)
	}
	want := "golang:" + goModVersion(t) + " "
	if !strings.Contains(froms[0]+" ", want) {
		t.Errorf("build stage FROM %s: want %s(go.mod's Go)", froms[0], want)
	}
	for _, s := range []string{"CGO_ENABLED=0", "-trimpath", "-tags grpcnotrace", "-X main.version=", "./cmd/wasp"} {
		if !strings.Contains(build, s) {
			t.Errorf("go build %q: no %s", build, s)
		}
	}
	if copyDest != binary || !reflect.DeepEqual(entrypoint, []string{binary}) {
		t.Errorf("final stage: binary copied to %q, ENTRYPOINT %q; want %s, as the DaemonSet runs it", copyDest, entrypoint, binary)
	}
	// iptables mode runs iptables-restore of the node's variant: the
	// image needs Debian's iptables package (both variants).
	if !regexp.MustCompile(`apt-get install[^\n]* iptables\b`).MatchString(installs) {
		t.Errorf("final stage: no apt-get install of iptables (RUN %q): iptables mode needs iptables-restore", installs)
	}
	if !hasVersionVar(t, filepath.Join("..", "cmd", "wasp")) {
		t.Error("-X main.version: cmd/wasp has no package-level var version, so the flag would set nothing")
	}
}

// hasVersionVar reports whether the main package in dir declares a
// package-level variable named version.
func hasVersionVar(t *testing.T, dir string) bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				if slices.ContainsFunc(s.(*ast.ValueSpec).Names, func(n *ast.Ident) bool { return n.Name == "version" }) {
					return true
				}
			}
		}
	}
	return false
}
