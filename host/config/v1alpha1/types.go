package v1alpha1

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WaspConfiguration is everything wasp run needs to proxy a node's
// Services. Pointer fields distinguish "not given" (defaulted) from a zero
// value that means something.
type WaspConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// ClientConnection is how wasp talks to the apiserver.
	ClientConnection ClientConnectionConfiguration `json:"clientConnection"`
	// HostnameOverride, if not empty, is the name of this node's Node
	// object; otherwise the host name is.
	HostnameOverride string `json:"hostnameOverride,omitempty"`
	// NodeIPOverride, if not empty, are this node's primary IPs, at most
	// one per family, instead of those of its Node object.
	NodeIPOverride []string `json:"nodeIPOverride,omitempty"`
	// IPFamilyPolicy says which IP families are proxied. Default
	// PreferDualStack.
	IPFamilyPolicy IPFamilyPolicy `json:"ipFamilyPolicy,omitempty"`

	// Mode is the dataplane: nftables or iptables. Default nftables. (A
	// KubeProxyConfiguration without a mode converts to iptables, as
	// kube-proxy runs it.)
	Mode ProxyMode `json:"mode,omitempty"`
	// SyncPeriod is how often the dataplane is fully resynced, and how
	// long after a failed sync it is retried. Must be greater than 0.
	// Default 30s.
	SyncPeriod metav1.Duration `json:"syncPeriod"`
	// MinSyncPeriod is the least time between two syncs after a burst of
	// changes; 0 syncs on every change. Default 1s.
	MinSyncPeriod *metav1.Duration `json:"minSyncPeriod,omitempty"`
	// ConfigSyncPeriod is how often the informers resync from their
	// cache. Must be greater than 0. Default 15m.
	ConfigSyncPeriod metav1.Duration `json:"configSyncPeriod"`

	// DetectLocalMode is how traffic from this node's pods is recognised.
	// Default ClusterCIDR, the only mode wasp implements.
	DetectLocalMode LocalMode `json:"detectLocalMode,omitempty"`
	// DetectLocal holds the settings of DetectLocalMode.
	DetectLocal DetectLocalConfiguration `json:"detectLocal"`
	// NodePortAddresses are where NodePorts answer: ["primary"] (the
	// node's primary IP of each family) or CIDRs (0.0.0.0/0 and ::/0:
	// every local address). Default by mode, as kube-proxy: ["primary"]
	// for nftables, every local address for iptables.
	NodePortAddresses []string `json:"nodePortAddresses,omitempty"`

	// HealthzBindAddress is the IP:port of /healthz and /livez; "" serves
	// none. Default 0.0.0.0:10256.
	HealthzBindAddress *string `json:"healthzBindAddress,omitempty"`
	// MetricsBindAddress is the IP:port of /metrics; "" serves none.
	// Default 127.0.0.1:10249.
	MetricsBindAddress *string `json:"metricsBindAddress,omitempty"`
	// EnableProfiling serves /debug/pprof/ on the metrics server, as
	// kube-proxy does.
	EnableProfiling bool `json:"enableProfiling,omitempty"`
	// ProfilingBindAddress, if not empty, is the IP:port of a server of
	// its own for /debug/pprof/. Keep it on a loopback address.
	ProfilingBindAddress string `json:"profilingBindAddress,omitempty"`

	// FeatureGates are kube-proxy's feature gates. wasp has none yet: it
	// implements the GA behaviour of the Service gates.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// ConfigHardFail, if true, makes unknown and duplicate fields in this
	// file fatal; if false they are warnings and the rest of the file is
	// used. Invalid values are fatal either way. Default true.
	ConfigHardFail *bool `json:"configHardFail,omitempty"`

	// Linux holds the settings of Linux nodes.
	Linux LinuxConfiguration `json:"linux"`
	// Windows holds the settings of Windows nodes.
	Windows WindowsConfiguration `json:"windows"`

	// NFTables holds the settings of the nftables dataplane.
	NFTables NFTablesConfiguration `json:"nftables"`
	// IPTables holds the settings of the iptables dataplane.
	IPTables IPTablesConfiguration `json:"iptables"`
	// IPVS holds the settings of the IPVS dataplane (not implemented by
	// wasp; kept so that a kube-proxy file converts whole).
	IPVS IPVSConfiguration `json:"ipvs"`

	// Modules replace the builtin module of a stage, at most one per
	// stage. Stages not listed run their builtin module.
	Modules []ModuleConfiguration `json:"modules,omitempty"`
	// ModuleSignatures, when set, make every module (of this file and of
	// ServiceProxyModule objects) load only with a signature it trusts, in
	// addition to the module's own signatures section (fail closed). Only
	// an oci:// module can carry a signature: with moduleSignatures set, a
	// file:// module does not load. Builtin modules, part of wasp, load
	// regardless.
	ModuleSignatures *ModuleSignatures `json:"moduleSignatures,omitempty"`
	// ModuleFileDirectories are the directories of the node whose files a
	// ServiceProxyModule may name: a file:// source, a public key or a
	// trusted root file. Absolute paths; a file under one of them, once
	// symbolic links are resolved, is allowed. Empty, the default: a
	// ServiceProxyModule names no file, its keys and trusted root are
	// inline. This file's own modules may name any file.
	ModuleFileDirectories []string `json:"moduleFileDirectories,omitempty"`
}

// ClientConnectionConfiguration is how wasp talks to the apiserver.
type ClientConnectionConfiguration struct {
	// Kubeconfig is the path of a kubeconfig file; "" uses the in-cluster
	// configuration.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// ContentType is the content type of requests. Default
	// application/vnd.kubernetes.protobuf.
	ContentType string `json:"contentType,omitempty"`
	// QPS is the steady rate of requests per second. Default 5.
	QPS float32 `json:"qps,omitempty"`
	// Burst is how many requests may exceed QPS at once. Default 10.
	Burst int32 `json:"burst,omitempty"`
}

// ProxyMode is a dataplane.
type ProxyMode string

// The proxy modes of kube-proxy on Linux. wasp implements nftables and
// iptables.
const (
	ProxyModeNFTables ProxyMode = "nftables"
	ProxyModeIPTables ProxyMode = "iptables"
	ProxyModeIPVS     ProxyMode = "ipvs"
)

// IPFamilyPolicy says which IP families are proxied.
type IPFamilyPolicy string

const (
	// SingleStack proxies the family of the node's first primary IP.
	SingleStack IPFamilyPolicy = "SingleStack"
	// PreferDualStack proxies every family the node has a primary IP of.
	PreferDualStack IPFamilyPolicy = "PreferDualStack"
	// RequireDualStack proxies both families and fails without a
	// primary IP of each.
	RequireDualStack IPFamilyPolicy = "RequireDualStack"
)

// LocalMode is how traffic from this node's pods is recognised.
type LocalMode string

// kube-proxy's local traffic detection modes. wasp implements ClusterCIDR.
const (
	LocalModeClusterCIDR         LocalMode = "ClusterCIDR"
	LocalModeNodeCIDR            LocalMode = "NodeCIDR"
	LocalModeBridgeInterface     LocalMode = "BridgeInterface"
	LocalModeInterfaceNamePrefix LocalMode = "InterfaceNamePrefix"
)

// NodePortAddressesPrimary is the nodePortAddresses keyword for the node's
// primary IPs.
const NodePortAddressesPrimary = "primary"

// DetectLocalConfiguration holds the settings of each DetectLocalMode.
type DetectLocalConfiguration struct {
	// ClusterCIDRs are the pod ranges, one or a dual-stack pair
	// (ClusterCIDR mode).
	ClusterCIDRs []string `json:"clusterCIDRs,omitempty"`
	// BridgeInterface is the pods' bridge (BridgeInterface mode).
	BridgeInterface string `json:"bridgeInterface,omitempty"`
	// InterfaceNamePrefix is the prefix of the pods' interfaces
	// (InterfaceNamePrefix mode).
	InterfaceNamePrefix string `json:"interfaceNamePrefix,omitempty"`
}

// LinuxConfiguration holds the settings of Linux nodes.
type LinuxConfiguration struct {
	// Conntrack is the kernel's connection tracking.
	Conntrack ConntrackConfiguration `json:"conntrack"`
	// OOMScoreAdj is the oom_score_adj of the wasp process, in
	// [-1000, 1000]. Default -999.
	OOMScoreAdj *int32 `json:"oomScoreAdj,omitempty"`
	// MasqueradeAll masquerades all traffic sent to ClusterIPs.
	MasqueradeAll bool `json:"masqueradeAll,omitempty"`
}

// ConntrackConfiguration is the kernel's connection tracking. A zero
// limit or timeout leaves the kernel's value as it is.
type ConntrackConfiguration struct {
	// MaxPerCore is nf_conntrack_max per CPU core (0 leaves the limit
	// and ignores Min). Default 32768.
	MaxPerCore *int32 `json:"maxPerCore,omitempty"`
	// Min is the least nf_conntrack_max, whatever MaxPerCore gives.
	// Default 131072.
	Min *int32 `json:"min,omitempty"`
	// TCPEstablishedTimeout is nf_conntrack_tcp_timeout_established.
	// Default 24h.
	TCPEstablishedTimeout *metav1.Duration `json:"tcpEstablishedTimeout,omitempty"`
	// TCPCloseWaitTimeout is nf_conntrack_tcp_timeout_close_wait.
	// Default 1h.
	TCPCloseWaitTimeout *metav1.Duration `json:"tcpCloseWaitTimeout,omitempty"`
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal: out-of-window
	// packets are not marked INVALID.
	TCPBeLiberal bool `json:"tcpBeLiberal,omitempty"`
	// UDPTimeout is nf_conntrack_udp_timeout (UNREPLIED entries).
	UDPTimeout metav1.Duration `json:"udpTimeout,omitempty"`
	// UDPStreamTimeout is nf_conntrack_udp_timeout_stream (ASSURED
	// entries).
	UDPStreamTimeout metav1.Duration `json:"udpStreamTimeout,omitempty"`
}

// WindowsConfiguration holds the settings of Windows nodes.
type WindowsConfiguration struct {
	// RunAsService integrates with the Windows service control manager.
	RunAsService bool `json:"runAsService,omitempty"`
}

// NFTablesConfiguration holds the settings of the nftables dataplane.
type NFTablesConfiguration struct {
	// MasqueradeBit is the bit of the packet mark that asks for
	// masquerading, in [0, 31]. Default 14.
	MasqueradeBit *int32 `json:"masqueradeBit,omitempty"`
}

// IPTablesConfiguration holds the settings of the iptables dataplane.
type IPTablesConfiguration struct {
	// MasqueradeBit is the bit of the packet mark that asks for
	// masquerading, in [0, 31]. Default 14.
	MasqueradeBit *int32 `json:"masqueradeBit,omitempty"`
	// LocalhostNodePorts lets IPv4 NodePorts answer on 127.0.0.0/8 too
	// (it sets net.ipv4.conf.all.route_localnet), when nodePortAddresses
	// allow every local address or an IPv4 loopback one. Default false
	// (KEP-784's default; a KubeProxyConfiguration converts with
	// kube-proxy's, true).
	LocalhostNodePorts *bool `json:"localhostNodePorts,omitempty"`
}

// IPVSConfiguration holds the settings of the IPVS dataplane.
type IPVSConfiguration struct {
	// MasqueradeBit is the bit of the packet mark that asks for
	// masquerading, in [0, 31]. Default 14.
	MasqueradeBit *int32 `json:"masqueradeBit,omitempty"`
	// Scheduler is the IPVS scheduler.
	Scheduler string `json:"scheduler,omitempty"`
	// ExcludeCIDRs are CIDRs whose IPVS services are left alone.
	ExcludeCIDRs []string `json:"excludeCIDRs,omitempty"`
	// StrictARP sets arp_ignore and arp_announce.
	StrictARP bool `json:"strictARP,omitempty"`
	// TCPTimeout is the idle timeout of IPVS TCP sessions (0: unchanged).
	TCPTimeout metav1.Duration `json:"tcpTimeout,omitempty"`
	// TCPFinTimeout is the timeout of IPVS TCP sessions after a FIN.
	TCPFinTimeout metav1.Duration `json:"tcpFinTimeout,omitempty"`
	// UDPTimeout is the timeout of IPVS UDP sessions.
	UDPTimeout metav1.Duration `json:"udpTimeout,omitempty"`
}

// ModuleConfiguration runs a module in a stage instead of the builtin one.
type ModuleConfiguration struct {
	// Stage is topology, traffic-policy or endpoint-selection.
	Stage string `json:"stage"`
	// Source is builtin:NAME, file:///ABSOLUTE/PATH or
	// oci://REPOSITORY@sha256:DIGEST.
	Source string `json:"source"`
	// Config is the module's own configuration, a JSON (or YAML) object,
	// kept as JSON.
	Config json.RawMessage `json:"config,omitempty"`
	// Limits bound what the module may use.
	Limits ModuleLimits `json:"limits"`
	// FailurePolicy is what a service port gets when the module fails on
	// it. Default KeepLastGood.
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`
	// Signatures, when set, make an oci:// module load only with a
	// cosign-compatible signature they trust (fail closed), in addition to
	// the node-wide moduleSignatures.
	Signatures *ModuleSignatures `json:"signatures,omitempty"`
	// Guardrails relax, for this module, invariants the host enforces on
	// its decisions. Default: every invariant enforced.
	Guardrails *ModuleGuardrails `json:"guardrails,omitempty"`
}

// ModuleGuardrails relax the invariants the host enforces on a
// traffic-policy module's sets (the stage that fills them): only serving
// endpoints in a set, only endpoints of this node in the local set. A
// decision that breaks one is refused for its service port, which gets
// the failure policy's fallback.
type ModuleGuardrails struct {
	// AllowNotServing lets the module put endpoints that are neither
	// serving nor ready into its sets. Default false.
	AllowNotServing bool `json:"allowNotServing,omitempty"`
	// AllowRemoteInLocal lets the module put endpoints of other nodes
	// into the local set (internalTrafficPolicy or externalTrafficPolicy
	// Local). Default false.
	AllowRemoteInLocal bool `json:"allowRemoteInLocal,omitempty"`
}

// ModuleSignatures say whose signature an OCI module must carry: one
// signature by one of the keys, or a keyless one by one of the
// identities, is enough. At least one key or a keyless section.
type ModuleSignatures struct {
	// PublicKeys are PEM "PUBLIC KEY" blocks (ECDSA, RSA or Ed25519),
	// each given inline or as the path of a file on the node.
	PublicKeys []string `json:"publicKeys,omitempty"`
	// Keyless accepts Sigstore keyless signatures (a Fulcio certificate,
	// logged in Rekor) of the identities it lists.
	Keyless *KeylessSignatures `json:"keyless,omitempty"`
}

// KeylessSignatures are the signers of keyless signatures trusted, and the
// Sigstore that vouches for them.
type KeylessSignatures struct {
	// TrustedRoot is the Sigstore trusted root (trusted_root.json): the
	// path of a file on the node, or the JSON itself. Required.
	TrustedRoot string `json:"trustedRoot"`
	// Identities are the signers trusted. At least one.
	Identities []CertificateIdentity `json:"identities"`
}

// CertificateIdentity is a keyless signer, as `cosign verify` names one:
// an OIDC issuer and a subject (an email, or a URI such as a CI
// workflow's), each exact or as a regular expression (RE2). One form of
// each is required.
type CertificateIdentity struct {
	Issuer        string `json:"issuer,omitempty"`
	IssuerRegExp  string `json:"issuerRegExp,omitempty"`
	Subject       string `json:"subject,omitempty"`
	SubjectRegExp string `json:"subjectRegExp,omitempty"`
}

// ModuleLimits bound what a module may use.
type ModuleLimits struct {
	// Memory caps each instance's linear memory, at most 4Gi. Default
	// 256Mi.
	Memory *resource.Quantity `json:"memory,omitempty"`
	// Timeout bounds one call. Default 2s.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Instances is the size of the instance pool; 0 is one per CPU that
	// Go may use (GOMAXPROCS).
	Instances int32 `json:"instances,omitempty"`
}

// FailurePolicy is what a service port gets when its module fails on it.
type FailurePolicy string

const (
	// KeepLastGood keeps the port's last good decision, or the builtin
	// module's if it never had one.
	KeepLastGood FailurePolicy = "KeepLastGood"
	// Builtin takes the builtin module's decision.
	Builtin FailurePolicy = "Builtin"
)
