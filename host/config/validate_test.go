package config

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/runtime"
)

func ptr[T any](v T) *T { return &v }

// valid is a defaulted configuration that every field is set in, valid.
func valid() *v1alpha1.WaspConfiguration {
	c := &v1alpha1.WaspConfiguration{
		HostnameOverride:     "node-a",
		NodeIPOverride:       []string{"198.51.100.1", "2001:db8::1"},
		DetectLocal:          v1alpha1.DetectLocalConfiguration{ClusterCIDRs: []string{"10.244.0.0/16", "fd00:10:244::/56"}},
		ProfilingBindAddress: "127.0.0.1:6060",
		IPVS:                 v1alpha1.IPVSConfiguration{ExcludeCIDRs: []string{"10.0.0.0/8"}},
		Modules: []v1alpha1.ModuleConfiguration{
			{Stage: "topology", Source: "builtin:topology"},
			{Stage: "traffic-policy", Source: "file:///etc/wasp/policy.wasm", Config: json.RawMessage(`{"zone":"a"}`),
				Guardrails: &v1alpha1.ModuleGuardrails{AllowNotServing: true, AllowRemoteInLocal: true}},
			{Stage: "endpoint-selection", Source: "oci://registry.example/wasp/spill@sha256:" + strings.Repeat("ab", 32)},
		},
	}
	Default(c)
	return c
}

func TestValidateValid(t *testing.T) {
	w, errs := Validate(valid())
	if len(errs) > 0 || len(w) > 0 {
		t.Fatalf("warnings %q, errors %v", w, errs)
	}
}

// TestValidateErrors: each problem is reported with its field path, and
// all of them at once.
func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *v1alpha1.WaspConfiguration)
		want   []string
	}{
		{"qps", func(c *v1alpha1.WaspConfiguration) { c.ClientConnection.QPS = -1 },
			[]string{"clientConnection.qps: Invalid value: -1: must be greater than or equal to 0"}},
		{"burst", func(c *v1alpha1.WaspConfiguration) { c.ClientConnection.Burst = -1 },
			[]string{"clientConnection.burst: Invalid value: -1: must be greater than or equal to 0"}},
		{"hostname", func(c *v1alpha1.WaspConfiguration) { c.HostnameOverride = "Node_A" },
			[]string{`hostnameOverride: Invalid value: "Node_A": a lowercase RFC 1123 subdomain`}},
		{"node IP", func(c *v1alpha1.WaspConfiguration) { c.NodeIPOverride = []string{"198.51.100.300"} },
			[]string{`nodeIPOverride[0]: Invalid value: "198.51.100.300": must be an IP address`}},
		{"node IP unspecified", func(c *v1alpha1.WaspConfiguration) { c.NodeIPOverride = []string{"::"} },
			[]string{`nodeIPOverride[0]: Invalid value: "::": must not be the unspecified address`}},
		{"node IPs of one family", func(c *v1alpha1.WaspConfiguration) { c.NodeIPOverride = []string{"10.0.0.1", "10.0.0.2"} },
			[]string{`nodeIPOverride[1]: Invalid value: "10.0.0.2": must be of the other IP family`}},
		{"ip family policy", func(c *v1alpha1.WaspConfiguration) { c.IPFamilyPolicy = "DualStack" },
			[]string{`ipFamilyPolicy: Unsupported value: "DualStack": supported values: "SingleStack", "PreferDualStack", "RequireDualStack"`}},
		{"ipvs", func(c *v1alpha1.WaspConfiguration) { c.Mode = "ipvs" },
			[]string{`mode: Invalid value: "ipvs": not implemented by wasp: use nftables or iptables`}},
		{"unknown mode", func(c *v1alpha1.WaspConfiguration) { c.Mode = "userspace" },
			[]string{`mode: Unsupported value: "userspace": supported values: "nftables", "iptables"`}},
		{"sync period", func(c *v1alpha1.WaspConfiguration) { c.SyncPeriod.Duration = 0 },
			[]string{`syncPeriod: Invalid value: "0s": must be greater than 0`}},
		{"negative min sync period", func(c *v1alpha1.WaspConfiguration) { c.MinSyncPeriod.Duration = -time.Second },
			[]string{`minSyncPeriod: Invalid value: "-1s": must be greater than or equal to 0`}},
		{"min sync period above sync period", func(c *v1alpha1.WaspConfiguration) { c.MinSyncPeriod.Duration = time.Hour },
			[]string{`minSyncPeriod: Invalid value: "1h0m0s": must not be greater than syncPeriod`}},
		{"config sync period", func(c *v1alpha1.WaspConfiguration) { c.ConfigSyncPeriod.Duration = -time.Minute },
			[]string{`configSyncPeriod: Invalid value: "-1m0s": must be greater than 0`}},
		{"detect local mode", func(c *v1alpha1.WaspConfiguration) { c.DetectLocalMode = "NodeCIDR" },
			[]string{`detectLocalMode: Invalid value: "NodeCIDR": not implemented by wasp: use ClusterCIDR`}},
		{"unknown detect local mode", func(c *v1alpha1.WaspConfiguration) { c.DetectLocalMode = "PodCIDR" },
			[]string{`detectLocalMode: Unsupported value: "PodCIDR"`}},
		{"cluster CIDR", func(c *v1alpha1.WaspConfiguration) { c.DetectLocal.ClusterCIDRs = []string{"10.244.0.0/33"} },
			[]string{`detectLocal.clusterCIDRs[0]: Invalid value: "10.244.0.0/33": must be a CIDR`}},
		{"cluster CIDRs of one family", func(c *v1alpha1.WaspConfiguration) {
			c.DetectLocal.ClusterCIDRs = []string{"10.0.0.0/8", "10.1.0.0/16"}
		},
			[]string{`detectLocal.clusterCIDRs: Invalid value: ["10.0.0.0/8","10.1.0.0/16"]: must be one CIDR or a dual-stack pair`}},
		{"three cluster CIDRs", func(c *v1alpha1.WaspConfiguration) {
			c.DetectLocal.ClusterCIDRs = []string{"10.0.0.0/8", "fd00::/8", "10.1.0.0/16"}
		}, []string{`detectLocal.clusterCIDRs: Too many: 3: must have at most 2 items`}},
		{"node port CIDR", func(c *v1alpha1.WaspConfiguration) { c.NodePortAddresses = []string{"10.0.0.0/8", "eth0"} },
			[]string{`nodePortAddresses[1]: Invalid value: "eth0": must be a CIDR or "primary"`}},
		{"primary and CIDRs", func(c *v1alpha1.WaspConfiguration) { c.NodePortAddresses = []string{"primary", "10.0.0.0/8"} },
			[]string{`nodePortAddresses[0]: Invalid value: "primary": "primary" cannot be combined with CIDRs`}},
		{"healthz without port", func(c *v1alpha1.WaspConfiguration) { c.HealthzBindAddress = ptr("0.0.0.0") },
			[]string{`healthzBindAddress: Invalid value: "0.0.0.0": must be IP:port`}},
		{"metrics host name", func(c *v1alpha1.WaspConfiguration) { c.MetricsBindAddress = ptr("localhost:10249") },
			[]string{`metricsBindAddress: Invalid value: "localhost:10249": "localhost" must be an IP address`}},
		{"profiling port", func(c *v1alpha1.WaspConfiguration) { c.ProfilingBindAddress = "127.0.0.1:70000" },
			[]string{`profilingBindAddress: Invalid value: "127.0.0.1:70000": port "70000" must be in [0,65535]`}},
		{"empty feature gate", func(c *v1alpha1.WaspConfiguration) { c.FeatureGates = map[string]bool{"": true} },
			[]string{`featureGates: Invalid value: "": must not be empty`}},
		{"oom score adj", func(c *v1alpha1.WaspConfiguration) { c.Linux.OOMScoreAdj = ptr[int32](-1001) },
			[]string{`linux.oomScoreAdj: Invalid value: -1001: must be in [-1000,1000]`}},
		{"conntrack", func(c *v1alpha1.WaspConfiguration) {
			ct := &c.Linux.Conntrack
			ct.MaxPerCore, ct.Min = ptr[int32](-1), ptr[int32](-2)
			ct.TCPEstablishedTimeout, ct.TCPCloseWaitTimeout = &metav1.Duration{Duration: -1}, &metav1.Duration{Duration: -2}
			ct.UDPTimeout.Duration, ct.UDPStreamTimeout.Duration = -3, -4
		}, []string{
			`linux.conntrack.maxPerCore: Invalid value: -1: must be greater than or equal to 0`,
			`linux.conntrack.min: Invalid value: -2: must be greater than or equal to 0`,
			`linux.conntrack.tcpCloseWaitTimeout: Invalid value: "-2ns": must be greater than or equal to 0`,
			`linux.conntrack.tcpEstablishedTimeout: Invalid value: "-1ns": must be greater than or equal to 0`,
			`linux.conntrack.udpStreamTimeout: Invalid value: "-4ns": must be greater than or equal to 0`,
			`linux.conntrack.udpTimeout: Invalid value: "-3ns": must be greater than or equal to 0`,
		}},
		{"masquerade bits", func(c *v1alpha1.WaspConfiguration) {
			c.NFTables.MasqueradeBit, c.IPTables.MasqueradeBit, c.IPVS.MasqueradeBit = ptr[int32](40), ptr[int32](-1), ptr[int32](32)
		}, []string{
			`nftables.masqueradeBit: Invalid value: 40: must be in [0,31]`,
			`iptables.masqueradeBit: Invalid value: -1: must be in [0,31]`,
			`ipvs.masqueradeBit: Invalid value: 32: must be in [0,31]`,
		}},
		{"ipvs", func(c *v1alpha1.WaspConfiguration) {
			c.IPVS.ExcludeCIDRs = []string{"10.0.0.0/8", "10.0.0.1"}
			c.IPVS.TCPTimeout.Duration, c.IPVS.TCPFinTimeout.Duration, c.IPVS.UDPTimeout.Duration = -1, -2, -3
		}, []string{
			`ipvs.excludeCIDRs[1]: Invalid value: "10.0.0.1": must be a CIDR`,
			`ipvs.tcpFinTimeout: Invalid value: "-2ns": must be greater than or equal to 0`,
			`ipvs.tcpTimeout: Invalid value: "-1ns": must be greater than or equal to 0`,
			`ipvs.udpTimeout: Invalid value: "-3ns": must be greater than or equal to 0`,
		}},
		{"module stage", func(c *v1alpha1.WaspConfiguration) { c.Modules[1].Stage = "routing" },
			[]string{`modules[1].stage: Unsupported value: "routing": supported values: "topology", "traffic-policy", "endpoint-selection"`}},
		{"module stage twice", func(c *v1alpha1.WaspConfiguration) { c.Modules[1].Stage, c.Modules[1].Guardrails = "topology", nil },
			[]string{`modules[1].stage: Duplicate value: "topology"`}},
		{"unknown builtin", func(c *v1alpha1.WaspConfiguration) { c.Modules[0].Source = "builtin:zones" },
			[]string{`modules[0].source: Unsupported value: "builtin:zones": supported values: "builtin:topology", "builtin:trafficpolicy", "builtin:selection"`}},
		{"builtin of another stage", func(c *v1alpha1.WaspConfiguration) { c.Modules[0].Source = "builtin:selection" },
			[]string{`modules[0].source: Invalid value: "builtin:selection": implements endpoint-selection, not topology`}},
		{"relative file", func(c *v1alpha1.WaspConfiguration) { c.Modules[1].Source = "file://policy.wasm" },
			[]string{`modules[1].source: Invalid value: "file://policy.wasm": must be file:// and an absolute path`}},
		{"oci by tag", func(c *v1alpha1.WaspConfiguration) { c.Modules[2].Source = "oci://registry.example/wasp/spill:v1" },
			[]string{`modules[2].source: Invalid value: "oci://registry.example/wasp/spill:v1": must name the module by digest`}},
		{"plain path", func(c *v1alpha1.WaspConfiguration) { c.Modules[1].Source = "/etc/wasp/policy.wasm" },
			[]string{`modules[1].source: Invalid value: "/etc/wasp/policy.wasm": must be builtin:NAME, file:///PATH or oci://REPOSITORY@sha256:DIGEST`}},
		{"module config", func(c *v1alpha1.WaspConfiguration) { c.Modules[1].Config = json.RawMessage(`[1]`) },
			[]string{`modules[1].config: Invalid value: "[1]": must be an object`}},
		{"module config too long", func(c *v1alpha1.WaspConfiguration) {
			c.Modules[1].Config = json.RawMessage(`{"a":"` + strings.Repeat("x", 1<<20) + `"}`)
		}, []string{`modules[1].config: Too long: may not be more than 1048576 bytes`}},
		{"module limits", func(c *v1alpha1.WaspConfiguration) {
			l := &c.Modules[0].Limits
			l.Memory, l.Timeout, l.Instances = resource.NewQuantity(5<<30, resource.BinarySI), &metav1.Duration{}, -1
		}, []string{
			`modules[0].limits.memory: Invalid value: "5Gi": must be in (0,4Gi]`,
			`modules[0].limits.timeout: Invalid value: "0s": must be greater than 0`,
			`modules[0].limits.instances: Invalid value: -1: must be greater than or equal to 0 (0: GOMAXPROCS)`,
		}},
		{"failure policy", func(c *v1alpha1.WaspConfiguration) { c.Modules[2].FailurePolicy = "Fail" },
			[]string{`modules[2].failurePolicy: Unsupported value: "Fail": supported values: "KeepLastGood", "Builtin"`}},
		{"guardrails of a stage that fills no set", func(c *v1alpha1.WaspConfiguration) {
			c.Modules[2].Guardrails = &v1alpha1.ModuleGuardrails{AllowNotServing: true, AllowRemoteInLocal: true}
		}, []string{
			`modules[2].guardrails.allowNotServing: Invalid value: true: only a traffic-policy module puts endpoints into sets`,
			`modules[2].guardrails.allowRemoteInLocal: Invalid value: true: only a traffic-policy module puts endpoints into sets`,
		}},
		{"signatures on a file module", func(c *v1alpha1.WaspConfiguration) {
			c.Modules[0].Source = "file:///etc/wasp/m.wasm"
			c.Modules[0].Signatures = &v1alpha1.ModuleSignatures{PublicKeys: []string{"/etc/wasp/key.pem"}}
		}, []string{`modules[0].signatures: Invalid value: "": only oci:// modules carry signatures`}},
		{"signatures without keys", func(c *v1alpha1.WaspConfiguration) {
			c.Modules[0].Source = "oci://registry.example/m@sha256:" + strings.Repeat("a", 64)
			c.Modules[0].Signatures = &v1alpha1.ModuleSignatures{PublicKeys: []string{" "}}
		}, []string{`modules[0].signatures.publicKeys[0]: Required value`}},
		{"empty signatures", func(c *v1alpha1.WaspConfiguration) {
			c.ModuleSignatures = &v1alpha1.ModuleSignatures{}
		}, []string{`moduleSignatures.publicKeys: Required value: at least one key or a keyless section`}},
		{"keyless", func(c *v1alpha1.WaspConfiguration) {
			c.ModuleSignatures = &v1alpha1.ModuleSignatures{Keyless: &v1alpha1.KeylessSignatures{
				Identities: []v1alpha1.CertificateIdentity{
					{Issuer: "https://token.actions.githubusercontent.com", SubjectRegExp: "^https://github.com/example/"},
					{Issuer: "https://issuer", IssuerRegExp: "x", SubjectRegExp: "("},
				},
			}}
		}, []string{
			`moduleSignatures.keyless.trustedRoot: Required value`,
			`moduleSignatures.keyless.identities[1].issuerRegExp: Forbidden: set issuer or issuerRegExp, not both`,
			`moduleSignatures.keyless.identities[1].subjectRegExp: Invalid value: "(": error parsing regexp`,
		}},
		{"keyless without identities", func(c *v1alpha1.WaspConfiguration) {
			c.Modules[0].Source = "oci://registry.example/m@sha256:" + strings.Repeat("a", 64)
			c.Modules[0].Signatures = &v1alpha1.ModuleSignatures{Keyless: &v1alpha1.KeylessSignatures{TrustedRoot: "/etc/wasp/trusted_root.json"}}
		}, []string{`modules[0].signatures.keyless.identities: Required value`}},
		{"module file directories", func(c *v1alpha1.WaspConfiguration) {
			c.ModuleFileDirectories = []string{"/etc/wasp/modules", "modules", "/etc/wasp/../etc"}
		}, []string{
			`moduleFileDirectories[1]: Invalid value: "modules": must be a clean absolute path`,
			`moduleFileDirectories[2]: Invalid value: "/etc/wasp/../etc": must be a clean absolute path`,
		}},
		{"every problem", func(c *v1alpha1.WaspConfiguration) {
			c.Mode, c.NFTables.MasqueradeBit, c.Modules[0].Stage = "ipvs", ptr[int32](40), "routing"
		}, []string{"mode: ", "nftables.masqueradeBit: ", "modules[0].stage: "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.change(c)
			_, errs := Validate(c)
			if len(errs) != len(tc.want) {
				t.Errorf("%d errors, want %d: %v", len(errs), len(tc.want), errs)
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(errs, func(e *field.Error) bool { return strings.Contains(e.Error(), w) }) {
					t.Errorf("no error contains %q: %v", w, errs)
				}
			}
		})
	}
}

func TestValidateWarnings(t *testing.T) {
	c := valid()
	c.Mode, c.Windows.RunAsService, c.FeatureGates = "ipvs", true, map[string]bool{"B": true, "A": false}
	w, _ := Validate(c)
	want := Warnings{
		`mode: "ipvs" is deprecated (KEP-5495): use nftables`,
		"featureGates: ignored: wasp has no feature gates, it implements the GA behaviour of the Service gates: A, B",
		"windows.runAsService: ignored: wasp has no Windows dataplane",
	}
	if !slices.Equal(w, want) {
		t.Errorf("got  %q\nwant %q", w, want)
	}
}

// TestModuleDefaults: the module limits written out are host/runtime's.
func TestModuleDefaults(t *testing.T) {
	if v1alpha1.DefaultModuleMemory != runtime.DefaultMemoryBytes || v1alpha1.DefaultModuleTimeout != runtime.DefaultTimeout {
		t.Errorf("module defaults %d, %v; host/runtime's %d, %v", v1alpha1.DefaultModuleMemory, v1alpha1.DefaultModuleTimeout,
			runtime.DefaultMemoryBytes, runtime.DefaultTimeout)
	}
}
