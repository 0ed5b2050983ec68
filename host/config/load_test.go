package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
)

const waspHeader = "apiVersion: wasp.dev/v1alpha1\nkind: WaspConfiguration\n"

const kubeProxyHeader = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// TestLoadErrors: what does not decode is an error naming the field, and
// nothing is returned.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []string
	}{
		{"unknown field", waspHeader + "nftables:\n  masqueradeBits: 3\nfoo: 1\n",
			[]string{"nftables.masqueradeBits: Forbidden: unknown field", "foo: Forbidden: unknown field"}},
		{"unknown field and invalid values", waspHeader + "foo: 1\nmode: ipvs\nnftables:\n  masqueradeBit: 40\n",
			[]string{"foo: Forbidden: unknown field", `mode: Invalid value: "ipvs"`, "nftables.masqueradeBit: Invalid value: 40"}},
		{"unknown field, hard fail said", waspHeader + "configHardFail: true\nfoo: 1\n", []string{"foo: Forbidden: unknown field"}},
		{"duplicate field", waspHeader + "mode: nftables\nmode: iptables\n", []string{`<document>: Invalid value: yaml: unmarshal errors: line 4: key "mode" already set in map`}},
		{"duplicate field in JSON", `{"apiVersion":"wasp.dev/v1alpha1","kind":"WaspConfiguration","linux":{"masqueradeAll":true,"masqueradeAll":false}}`,
			[]string{`key "masqueradeAll" already set in map`}},
		{"duration", waspHeader + "syncPeriod: soon\n", []string{`syncPeriod: Invalid value: "soon": time: invalid duration "soon"`}},
		{"number", waspHeader + "nftables:\n  masqueradeBit: high\n", []string{`nftables.masqueradeBit: Invalid value: "high": must be of type int32`}},
		{"int32 overflow", waspHeader + "linux:\n  conntrack:\n    min: 4294967296\n", []string{`linux.conntrack.min: Invalid value: 4294967296: must be of type int32`}},
		{"object for a string", waspHeader + "hostnameOverride:\n  name: a\n", []string{`hostnameOverride: Invalid value: {"name":"a"}: must be of type string`}},
		{"in a list", waspHeader + "modules:\n- stage: topology\n  source: builtin:topology\n- stage: traffic-policy\n  limits:\n    memory: lots\n",
			[]string{`modules[1].limits.memory: Invalid value: "lots": quantities must match`}},
		{"several", waspHeader + "syncPeriod: soon\nminSyncPeriod: later\n", []string{"syncPeriod: Invalid value", "minSyncPeriod: Invalid value"}},
		{"invalid values", waspHeader + "mode: ipvs\nnftables:\n  masqueradeBit: 40\n",
			[]string{`mode: Invalid value: "ipvs": not implemented by wasp`, "nftables.masqueradeBit: Invalid value: 40: must be in [0,31]"}},
		{"kube-proxy invalid values", kubeProxyHeader + "oomScoreAdj: 2000\nclusterCIDR: 10.0.0.0/8,10.1.0.0/16\n",
			[]string{"linux.oomScoreAdj: Invalid value: 2000", "detectLocal.clusterCIDRs: Invalid value"}},
		{"kube-proxy type error", kubeProxyHeader + "iptables:\n  syncPeriod: 1y\n", []string{`iptables.syncPeriod: Invalid value: "1y"`}},
		{"kube-proxy bad bindAddress", kubeProxyHeader + "bindAddress: node-a\n", []string{`nodeIPOverride[0]: Invalid value: "node-a": must be an IP address`}},
		{"no kind", "mode: nftables\n", []string{"apiVersion: Required value: and kind: want wasp.dev/v1alpha1 WaspConfiguration or kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration"}},
		{"other kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
			[]string{`kind: Unsupported value: "kubelet.config.k8s.io/v1beta1 KubeletConfiguration"`}},
		{"kube-proxy v1alpha2", "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n", []string{"kind: Unsupported value"}},
		{"not an object", "- a\n- b\n", []string{"<document>: Invalid value: want a YAML or JSON object"}},
		{"empty", "", []string{"<document>: Invalid value: want a YAML or JSON object"}},
		{"not YAML", "a: [\n", []string{"<document>: Invalid value: "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := Load([]byte(tc.data))
			if err == nil {
				t.Fatalf("no error; loaded %+v", c)
			}
			if c != nil {
				t.Errorf("a configuration with the error: %+v", c)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestLoadLenient: unknown and duplicate fields are warnings in a file that
// says configHardFail: false, and in a KubeProxyConfiguration; the rest is
// used.
func TestLoadLenient(t *testing.T) {
	tests := []struct {
		name     string
		data     string
		warnings []string
		check    func(t *testing.T, c *v1alpha1.WaspConfiguration)
	}{
		{"configHardFail false", waspHeader + "configHardFail: false\nfoo: 1\nmode: nftables\nhostnameOverride: a\nhostnameOverride: b\n",
			[]string{
				`<document>: Invalid value: yaml: unmarshal errors: line 7: key "hostnameOverride" already set in map (configHardFail is false, so this is ignored)`,
				"foo: Forbidden: unknown field (configHardFail is false, so this is ignored)",
			},
			func(t *testing.T, c *v1alpha1.WaspConfiguration) {
				if c.HostnameOverride != "b" {
					t.Errorf("hostnameOverride %q, want the last one, b", c.HostnameOverride)
				}
			}},
		{"kube-proxy", kubeProxyHeader + "mode: nftables\nudpIdleTimeout: 250ms\nclusterCIDR: 10.244.0.0/16\n",
			[]string{"udpIdleTimeout: Forbidden: unknown field (decoded leniently, as kube-proxy does)"},
			func(t *testing.T, c *v1alpha1.WaspConfiguration) {
				if len(c.DetectLocal.ClusterCIDRs) != 1 || c.DetectLocal.ClusterCIDRs[0] != "10.244.0.0/16" {
					t.Errorf("clusterCIDRs %q", c.DetectLocal.ClusterCIDRs)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, w, err := Load([]byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(w, "\n") != strings.Join(tc.warnings, "\n") {
				t.Errorf("warnings\n%s\nwant\n%s", strings.Join(w, "\n"), strings.Join(tc.warnings, "\n"))
			}
			tc.check(t, c)
		})
	}
}

// TestMarshalRoundTrip: a configuration written by Marshal loads back the
// same, the golden files included.
func TestMarshalRoundTrip(t *testing.T) {
	c := valid()
	out, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, w, err := Load(out)
	if err != nil || len(w) > 0 {
		t.Fatalf("%v, warnings %q:\n%s", err, w, out)
	}
	if !equality.Semantic.DeepEqual(c, back) {
		t.Errorf("wrote\n%s\nread back %+v", out, back)
	}

	goldens, _ := filepath.Glob("testdata/convert/*.golden.yaml")
	for _, g := range goldens {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "# error: ") {
			continue
		}
		if _, _, err := Load(data); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
}

// FuzzLoad: Load never panics, and what it loads writes out and loads
// back the same.
func FuzzLoad(f *testing.F) {
	inputs, _ := filepath.Glob("testdata/convert/*.yaml")
	for _, in := range inputs {
		data, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	valid, _ := Marshal(valid())
	f.Add(valid)
	f.Add([]byte(waspHeader + "modules:\n- stage: topology\n  source: builtin:topology\n  config: {a: [1, 2.5, null, {b: x}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, _, err := Load(data)
		if err != nil {
			return
		}
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, _, err := Load(out)
		if err != nil {
			t.Fatalf("what loaded does not load back: %v\n%s", err, out)
		}
		if !equality.Semantic.DeepEqual(c, back) {
			t.Fatalf("loaded back differently:\n%s\nfirst  %+v\nsecond %+v", out, c, back)
		}
	})
}

// TestModeDefaults: the mode a file asks for is the one wasp runs, with
// that mode's kube-proxy defaults, and it survives being written out: a
// kube-proxy file without a mode runs iptables, as kube-proxy; wasp's own
// file without one runs nftables; ipvs becomes nftables with a warning.
func TestModeDefaults(t *testing.T) {
	all, primary := []string{"0.0.0.0/0", "::/0"}, []string{"primary"}
	tests := []struct {
		name          string
		file          string
		mode          v1alpha1.ProxyMode
		nodePorts     []string
		localhostNP   bool
		warning       string
		masqueradeBit int32 // of the mode's section
	}{
		{"wasp, no mode", waspHeader, "nftables", primary, false, "", 14},
		{"wasp, iptables", waspHeader + "mode: iptables\niptables:\n  masqueradeBit: 12\n", "iptables", all, false, "", 12},
		{"wasp, iptables, its own addresses", waspHeader + "mode: iptables\nnodePortAddresses: [primary]\n", "iptables", primary, false, "", 14},
		{"kube-proxy, no mode", kubeProxyHeader, "iptables", all, true, "", 14},
		{"kube-proxy, iptables", kubeProxyHeader + "mode: iptables\niptables:\n  localhostNodePorts: false\n", "iptables", all, false, "", 14},
		{"kube-proxy, nftables", kubeProxyHeader + "mode: nftables\n", "nftables", primary, true, "", 14},
		{"kube-proxy, ipvs", kubeProxyHeader + "mode: ipvs\niptables:\n  masqueradeBit: 11\n", "nftables", primary, true, `mode: "ipvs": wasp runs nftables`, 11},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, w, err := Load([]byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if tc.warning == "" && len(w) > 0 || tc.warning != "" && (len(w) == 0 || !strings.Contains(w[0], tc.warning)) {
				t.Errorf("warnings %q, want %q", w, tc.warning)
			}
			bit := *c.NFTables.MasqueradeBit
			if c.Mode == v1alpha1.ProxyModeIPTables {
				bit = *c.IPTables.MasqueradeBit
			}
			if c.Mode != tc.mode || !slices.Equal(c.NodePortAddresses, tc.nodePorts) || *c.IPTables.LocalhostNodePorts != tc.localhostNP || bit != tc.masqueradeBit {
				t.Errorf("mode %s, nodePortAddresses %q, localhostNodePorts %v, masqueradeBit %d; want %s, %q, %v, %d",
					c.Mode, c.NodePortAddresses, *c.IPTables.LocalhostNodePorts, bit, tc.mode, tc.nodePorts, tc.localhostNP, tc.masqueradeBit)
			}
			out, err := Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			back, w, err := Load(out)
			if err != nil || len(w) > 0 || !reflect.DeepEqual(back, c) {
				t.Errorf("written and read back: %+v, %q, %v\nwant %+v", back, w, err, c)
			}
		})
	}
}
