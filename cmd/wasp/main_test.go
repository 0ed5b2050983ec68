package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func run(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestExplainSample(t *testing.T) {
	out, _, err := run(t, "", "explain", "--node", "node-b")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 {
		t.Fatalf("want 7 documents for the sample's service ports, got %d:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var doc map[string]any
		if err := json.Unmarshal([]byte(l), &doc); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		for _, k := range []string{"service", "port", "protocol", "clusterEndpoints", "localEndpoints", "allReachableEndpoints", "hasAnyEndpoints", "weights"} {
			if _, ok := doc[k]; !ok {
				t.Errorf("document %q lacks %q", l, k)
			}
		}
	}
}

// TestExplainErrors: bad input gets a clear error naming the culprit, and
// nothing is printed on stdout.
func TestExplainErrors(t *testing.T) {
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"unknown output", "", []string{"explain", "-o", "yaml"}, `--output "yaml"`},
		{"bad module flag", "", []string{"explain", "--module", "nope"}, "want STAGE=SOURCE"},
		{"unknown stage", "", []string{"explain", "--module", "routing=x.wasm"}, `unknown stage "routing"`},
		{"missing module file", "", []string{"explain", "--module", "topology=/does/not/exist.wasm"}, "stage topology"},
		{"unsupported scheme", "", []string{"explain", "--module", "topology=https://example.com/m.wasm"}, `scheme "https"`},
		{"missing node", "", []string{"explain", "--node", "node-z"}, `"node-z"`},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", []string{"explain", "-f", "-"}, "document 1"},
		{"unparsable", "{not yaml: [", []string{"explain", "-f", "-"}, "document 1"},
		{"slice without service label", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, namespace: d}\naddressType: IPv4\nendpoints: []\n",
			[]string{"explain", "-f", "-"}, "kubernetes.io/service-name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := run(t, tc.stdin, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("stdout must stay empty on error, got %q", out)
			}
		})
	}
}
