package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/wasp-proxy/wasp/backends"
	backendfake "github.com/wasp-proxy/wasp/backends/fake"
	"github.com/wasp-proxy/wasp/examples/cluster"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/proxy"
)

// Test address plan: node 198.51.100.1, ClusterIPs in 10.96.0.0/16, pods in
// 10.244.0.0/16.

// eventually is a failure guard, not a timing assertion: it only bounds how
// long a broken loop can hang the test.
const eventually = 30 * time.Second

const nodeYAML = `apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  addresses: [{type: InternalIP, address: 198.51.100.1}]
`

// serviceYAML returns Service default/name on clusterIP with TCP port
// "http" port, and its EndpointSlice with one ready endpoint per address.
func serviceYAML(name, clusterIP string, port int, addrs ...string) string {
	eps := " []\n"
	if len(addrs) > 0 {
		eps = "\n"
		for _, a := range addrs {
			eps += fmt.Sprintf("- {addresses: [%s], conditions: {ready: true}, nodeName: node-b}\n", a)
		}
	}
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: default}
spec:
  type: ClusterIP
  clusterIP: %[2]s
  clusterIPs: [%[2]s]
  ipFamilies: [IPv4]
  ports: [{name: http, port: %[3]d, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-abc
  namespace: default
  labels: {kubernetes.io/service-name: %[1]s}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:%[4]s`, name, clusterIP, port, eps)
}

// mtime gives every write of a test a distinct modification time, a second
// apart, so that a change is seen whatever the file system's granularity.
var mtime = time.Now().Add(-time.Hour)

// write writes content to dir/name and returns its path.
func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	mtime = mtime.Add(time.Second)
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return p
}

// names lists what s's clientset holds, as "Kind namespace/name", sorted.
func names(t *testing.T, s *Source) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	nodes, err := s.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		out = append(out, "Node "+n.Name)
	}
	svcs, err := s.Client().CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range svcs.Items {
		out = append(out, "Service "+o.Namespace+"/"+o.Name)
	}
	eps, err := s.Client().DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range eps.Items {
		out = append(out, "EndpointSlice "+o.Namespace+"/"+o.Name)
	}
	slices.Sort(out)
	return out
}

// writes returns the create, update and delete actions s's clientset got
// since the last call, as "verb resource name".
// recorder records the writes a Source makes to its clientset.
type recorder struct {
	mu     sync.Mutex
	writes []string
}

// react is a reactor that records create, update and delete actions and
// leaves them to the next reactor.
func (r *recorder) react(a k8stesting.Action) (bool, runtime.Object, error) {
	var w string
	switch a.GetVerb() {
	case "create", "update":
		w = a.GetVerb() + " " + a.GetResource().Resource + " " + nameOf(a.(k8stesting.CreateAction).GetObject())
	case "delete":
		w = "delete " + a.GetResource().Resource + " " + a.(k8stesting.DeleteAction).GetName()
	default:
		return false, nil, nil
	}
	r.mu.Lock()
	r.writes = append(r.writes, w)
	r.mu.Unlock()
	return false, nil, nil
}

// take returns the writes recorded since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.writes
	r.writes = nil
	return out
}

func nameOf(o any) string {
	if m, ok := o.(metav1.Object); ok {
		return m.GetName()
	}
	return "?"
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	sample := write(t, dir, "sample.yaml", string(cluster.Sample))

	split := t.TempDir()
	write(t, split, "nodes.yaml", nodeYAML)
	write(t, split, "web.yml", serviceYAML("web", "10.96.0.10", 80, "10.244.2.10"))
	write(t, split, "api.json", `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api"},
		"spec": {"clusterIP": "10.96.0.20", "ports": [{"port": 443}]}}`)
	write(t, split, ".web.yml.swp", "not yaml: [")
	write(t, split, "README.md", "not yaml: [")
	if err := os.Mkdir(filepath.Join(split, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		path string
		want []string
	}{
		{"file", sample, nil}, // checked by count below
		{"directory", split, []string{
			"EndpointSlice default/web-abc",
			"Node node-a",
			"Service default/api",
			"Service default/web",
		}},
		{"empty directory", t.TempDir(), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Opts{Path: tc.path})
			if err != nil {
				t.Fatal(err)
			}
			got := names(t, s)
			if tc.name == "file" {
				// The sample: 3 nodes, 7 Services, 8 EndpointSlices.
				if len(got) != 18 {
					t.Fatalf("got %d objects, want 18: %q", len(got), got)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNewErrors: every error names the file and, when there is one, the
// object.
func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	bad := write(t, dir, "bad.yaml", "{not yaml: [")
	badField := write(t, dir, "badfield.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: demo}\nspec: {portz: []}\n")
	dup := t.TempDir()
	write(t, dup, "a.yaml", serviceYAML("web", "10.96.0.10", 80))
	dupB := write(t, dup, "b.yaml", serviceYAML("web", "10.96.0.10", 81))
	twoBad := t.TempDir()
	write(t, twoBad, "a.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
	write(t, twoBad, "b.yaml", "apiVersion: v1\nkind: Node\nmetadata: {}\n")

	tests := []struct {
		name string
		opts Opts
		want []string
	}{
		{"no path", Opts{}, []string{"path: required"}},
		{"negative interval", Opts{Path: dir, PollInterval: -time.Second}, []string{"pollInterval"}},
		{"missing", Opts{Path: filepath.Join(dir, "nope.yaml")}, []string{"nope.yaml", "no such file"}},
		{"unparsable", Opts{Path: bad}, []string{bad, "document 1", "not valid YAML"}},
		{"unknown field", Opts{Path: badField}, []string{badField, `Service "demo/web"`, "spec.portz"}},
		{"defined twice", Opts{Path: dup}, []string{dupB, `Service "default/web"`, "also defined in " + filepath.Join(dup, "a.yaml")}},
		{"every file's problems", Opts{Path: twoBad}, []string{"a.yaml", `"Pod"`, "b.yaml", "metadata.name: required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestPoll: an edit reaches the clientset as the creates, updates and
// deletes an apiserver would show; an unchanged object is not written; a
// broken snapshot changes nothing until it is fixed.
func TestPoll(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	write(t, dir, "node.yaml", nodeYAML)
	write(t, dir, "web.yaml", serviceYAML("web", "10.96.0.10", 80, "10.244.2.10"))
	var rec recorder
	s, err := newSource(Opts{Path: dir, PollInterval: time.Hour}, rec.react)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{
		"create nodes node-a", "create services web", "create endpointslices web-abc",
	}; !slices.Equal(got, want) {
		t.Fatalf("New wrote %q, want %q", got, want)
	}

	steps := []struct {
		name  string
		edit  func()
		want  []string
		reads int // successful reads so far
	}{
		{"nothing changed", func() {}, nil, 1},
		{"rewritten as it was", func() { write(t, dir, "web.yaml", serviceYAML("web", "10.96.0.10", 80, "10.244.2.10")) }, nil, 2},
		{"port edited", func() { write(t, dir, "web.yaml", serviceYAML("web", "10.96.0.10", 8080, "10.244.2.10")) },
			[]string{"update services web"}, 3},
		{"service added, endpoint added", func() {
			write(t, dir, "web.yaml", serviceYAML("web", "10.96.0.10", 8080, "10.244.2.10", "10.244.2.11")+serviceYAML("api", "10.96.0.20", 443))
		}, []string{"create services api", "create endpointslices api-abc", "update endpointslices web-abc"}, 4},
		{"broken file", func() { write(t, dir, "web.yaml", "kind: [") }, nil, 4},
		{"still broken", func() {}, nil, 4},
		{"file removed, web with it", func() {
			os.Remove(filepath.Join(dir, "web.yaml"))
			write(t, dir, "api.yaml", serviceYAML("api", "10.96.0.20", 443))
		}, []string{"delete endpointslices web-abc", "delete services web"}, 5},
		{"directory gone", func() { os.RemoveAll(dir) }, nil, 5},
	}
	for _, st := range steps {
		st.edit()
		s.poll(ctx)
		if n := len(s.client.Actions()); n != 0 {
			t.Errorf("%s: the clientset keeps %d actions; want none", st.name, n)
		}
		if got := rec.take(); !slices.Equal(got, st.want) {
			t.Errorf("%s: wrote %q, want %q", st.name, got, st.want)
		}
		if s.reads != st.reads {
			t.Errorf("%s: %d successful reads, want %d", st.name, s.reads, st.reads)
		}
	}
	if got, want := names(t, s), []string{"EndpointSlice default/api-abc", "Node node-a", "Service default/api"}; !slices.Equal(got, want) {
		t.Errorf("after a failed read the clientset holds %q, want the last good %q", got, want)
	}
}

// TestManyChanges: a change of far more objects than a fake watcher
// buffers reaches a slow watcher whole, instead of panicking the fake.
func TestManyChanges(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	write(t, dir, "node.yaml", nodeYAML)
	s, err := New(Opts{Path: dir, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Client().CoreV1().Services("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	const n = 5 * 100 // 5× watch.DefaultChanSize
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: s%d}\nspec: {clusterIP: 10.96.%d.%d, ports: [{port: 80}]}\n", i, i/250, i%250+1)
	}
	write(t, dir, "many.yaml", b.String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.poll(ctx)
	}()
	deadline := time.After(eventually)
	for got := 0; got < n; {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added {
				t.Fatalf("event %d: %s, want ADDED", got, ev.Type)
			}
			got++
			time.Sleep(100 * time.Microsecond) // a slow reader
		case <-deadline:
			t.Fatalf("got %d of %d events", got, n)
		}
	}
	<-done
}

// TestProxyFollowsEdits runs the proxy's sync loop over a Source and edits
// the file under it: the backend follows.
func TestProxyFollowsEdits(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	dir := t.TempDir()
	file := write(t, dir, "cluster.yaml", nodeYAML+serviceYAML("web", "10.96.0.10", 80, "10.244.2.10"))
	s, err := New(Opts{Path: file, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	be := backendfake.New()
	p, err := proxy.New(proxy.Opts{
		NodeName:      "node-a",
		Client:        s.Client(),
		Pipeline:      pipeline.New(pipeline.Options{}),
		Backends:      map[backends.Family]backends.Backend{backends.IPv4: be},
		MinSyncPeriod: time.Millisecond,
		RetryPeriod:   time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { p.Run(ctx); done <- struct{}{} }()
	go func() { s.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })

	waitFor(t, be, "cluster { 10.244.2.10:8080 weight 1 }")
	write(t, dir, "cluster.yaml", nodeYAML+serviceYAML("web", "10.96.0.10", 80, "10.244.2.10", "10.244.2.11"))
	waitFor(t, be, "cluster { 10.244.2.10:8080 weight 1, 10.244.2.11:8080 weight 1 }")
	write(t, dir, "cluster.yaml", nodeYAML+serviceYAML("web", "10.96.0.10", 81, "10.244.2.11"))
	waitFor(t, be, "cluster-ip 10.96.0.10 tcp dport 81\n")
}

// waitFor polls be's dump until it contains want, failing the test after
// eventually.
func waitFor(t *testing.T, be *backendfake.Fake, want string) {
	t.Helper()
	deadline := time.Now().Add(eventually)
	for !strings.Contains(be.Dump(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the backend never got %q; it has:\n%s", want, be.Dump())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
