// Package kubeproxy is kube-proxy's configuration file format,
// kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration, as kube-proxy
// reads it: the types (the JSON names of k8s.io/kube-proxy/config/v1alpha1,
// without importing it) and kube-proxy's defaults for them.
package kubeproxy

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
)

// GroupVersion and Kind of kube-proxy's configuration.
var GroupVersion = schema.GroupVersion{Group: "kubeproxy.config.k8s.io", Version: "v1alpha1"}

// Kind is the kind of kube-proxy's configuration.
const Kind = "KubeProxyConfiguration"

// Configuration is KubeProxyConfiguration.
type Configuration struct {
	metav1.TypeMeta `json:",inline"`

	FeatureGates                map[string]bool               `json:"featureGates,omitempty"`
	ClientConnection            ClientConnectionConfiguration `json:"clientConnection"`
	Logging                     LoggingConfiguration          `json:"logging,omitempty"`
	HostnameOverride            string                        `json:"hostnameOverride"`
	BindAddress                 string                        `json:"bindAddress"`
	HealthzBindAddress          string                        `json:"healthzBindAddress"`
	MetricsBindAddress          string                        `json:"metricsBindAddress"`
	BindAddressHardFail         bool                          `json:"bindAddressHardFail"`
	EnableProfiling             bool                          `json:"enableProfiling"`
	ShowHiddenMetricsForVersion string                        `json:"showHiddenMetricsForVersion"`

	Mode      string                 `json:"mode"`
	IPTables  IPTablesConfiguration  `json:"iptables"`
	IPVS      IPVSConfiguration      `json:"ipvs"`
	NFTables  NFTablesConfiguration  `json:"nftables"`
	Winkernel WinkernelConfiguration `json:"winkernel"`

	DetectLocalMode string                   `json:"detectLocalMode"`
	DetectLocal     DetectLocalConfiguration `json:"detectLocal"`
	ClusterCIDR     string                   `json:"clusterCIDR"`

	NodePortAddresses []string               `json:"nodePortAddresses"`
	OOMScoreAdj       *int32                 `json:"oomScoreAdj"`
	Conntrack         ConntrackConfiguration `json:"conntrack"`
	ConfigSyncPeriod  metav1.Duration        `json:"configSyncPeriod"`

	PortRange           string `json:"portRange"`
	WindowsRunAsService bool   `json:"windowsRunAsService,omitempty"`
}

// ClientConnectionConfiguration is component-base's.
type ClientConnectionConfiguration struct {
	Kubeconfig         string  `json:"kubeconfig"`
	AcceptContentTypes string  `json:"acceptContentTypes"`
	ContentType        string  `json:"contentType"`
	QPS                float32 `json:"qps"`
	Burst              int32   `json:"burst"`
}

// LoggingConfiguration is component-base's logs API v1, the parts wasp
// looks at; flushFrequency and options are kept unparsed.
type LoggingConfiguration struct {
	Format         string          `json:"format,omitempty"`
	FlushFrequency json.RawMessage `json:"flushFrequency,omitempty"`
	Verbosity      uint32          `json:"verbosity"`
	VModule        []VModuleItem   `json:"vmodule,omitempty"`
	Options        json.RawMessage `json:"options,omitempty"`
}

// VModuleItem is one -vmodule entry.
type VModuleItem struct {
	FilePattern string `json:"filePattern"`
	Verbosity   uint32 `json:"verbosity"`
}

// IPTablesConfiguration is KubeProxyIPTablesConfiguration.
type IPTablesConfiguration struct {
	MasqueradeBit      *int32          `json:"masqueradeBit"`
	MasqueradeAll      bool            `json:"masqueradeAll"`
	LocalhostNodePorts *bool           `json:"localhostNodePorts"`
	SyncPeriod         metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod      metav1.Duration `json:"minSyncPeriod"`
}

// IPVSConfiguration is KubeProxyIPVSConfiguration.
type IPVSConfiguration struct {
	SyncPeriod    metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod metav1.Duration `json:"minSyncPeriod"`
	Scheduler     string          `json:"scheduler"`
	ExcludeCIDRs  []string        `json:"excludeCIDRs"`
	StrictARP     bool            `json:"strictARP"`
	TCPTimeout    metav1.Duration `json:"tcpTimeout"`
	TCPFinTimeout metav1.Duration `json:"tcpFinTimeout"`
	UDPTimeout    metav1.Duration `json:"udpTimeout"`
}

// NFTablesConfiguration is KubeProxyNFTablesConfiguration.
type NFTablesConfiguration struct {
	MasqueradeBit *int32          `json:"masqueradeBit"`
	MasqueradeAll bool            `json:"masqueradeAll"`
	SyncPeriod    metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod metav1.Duration `json:"minSyncPeriod"`
}

// ConntrackConfiguration is KubeProxyConntrackConfiguration: the same
// fields, names and pointers as wasp's linux.conntrack.
type ConntrackConfiguration = v1alpha1.ConntrackConfiguration

// WinkernelConfiguration is KubeProxyWinkernelConfiguration.
type WinkernelConfiguration struct {
	NetworkName           string `json:"networkName"`
	SourceVip             string `json:"sourceVip"`
	EnableDSR             bool   `json:"enableDSR"`
	RootHnsEndpointName   string `json:"rootHnsEndpointName"`
	ForwardHealthCheckVip bool   `json:"forwardHealthCheckVip"`
}

// DetectLocalConfiguration is kube-proxy's DetectLocalConfiguration.
type DetectLocalConfiguration struct {
	BridgeInterface     string `json:"bridgeInterface"`
	InterfaceNamePrefix string `json:"interfaceNamePrefix"`
}
