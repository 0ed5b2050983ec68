package controlplane

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseGoMod(t *testing.T) {
	tests := []struct {
		name        string
		gomod       string
		wantGo      string
		wantStaging []string
	}{
		{
			name: "blocks, comments and non-staging requirements",
			gomod: `module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
	github.com/spf13/cobra v1.10.2
	k8s.io/api v0.0.0
	k8s.io/klog/v2 v2.140.0
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2
)

require (
	k8s.io/apiserver v0.0.0 // indirect
)

replace k8s.io/api => ./staging/src/k8s.io/api
`,
			wantGo:      "1.26.0",
			wantStaging: []string{"k8s.io/api", "k8s.io/apiserver"},
		},
		{
			name:        "single-line require",
			gomod:       "module m\ngo 1.25\nrequire k8s.io/kubectl v0.0.0\nrequire example.com/x v0.0.0\n",
			wantGo:      "1.25",
			wantStaging: []string{"k8s.io/kubectl"},
		},
		{
			name:  "nothing",
			gomod: "module m\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotGo, gotStaging := parseGoMod([]byte(tt.gomod))
			if gotGo != tt.wantGo || !slices.Equal(gotStaging, tt.wantStaging) {
				t.Errorf("parseGoMod() = %q, %q; want %q, %q", gotGo, gotStaging, tt.wantGo, tt.wantStaging)
			}
		})
	}
}

func TestKubernetesWrapperGoMod(t *testing.T) {
	upstream := "module k8s.io/kubernetes\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/api v0.0.0\n\tk8s.io/apiserver v0.0.0\n)\n"
	got, err := kubernetesWrapperGoMod([]byte(upstream), "v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	want := `module waspe2e/kubernetes

go 1.26.0

require k8s.io/kubernetes v1.36.3

replace (
	k8s.io/api => k8s.io/api v0.36.3
	k8s.io/apiserver => k8s.io/apiserver v0.36.3
)
`
	if string(got) != want {
		t.Errorf("wrapper go.mod:\n%s\nwant:\n%s", got, want)
	}

	if _, err := kubernetesWrapperGoMod([]byte("module k8s.io/kubernetes\n\ngo 1.26.0\n"), "v1.36.3"); err == nil || !strings.Contains(err.Error(), "0 staging modules") {
		t.Errorf("go.mod without staging modules: err = %v, want one naming 0 staging modules", err)
	}
}

// TestBuildKubeProxy builds upstream kube-proxy on demand and checks its
// version stamp.
func TestBuildKubeProxy(t *testing.T) {
	if !Enabled() {
		t.Skip("end-to-end test: set WASP_E2E=1 to build kube-proxy (seconds with kube-apiserver built, minutes without)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	bin, err := BuildKubeProxy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "Kubernetes "+KubernetesVersion {
		t.Errorf("%s --version = %q, want %q", bin, got, "Kubernetes "+KubernetesVersion)
	}
}
