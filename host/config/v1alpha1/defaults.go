package v1alpha1

import (
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/backends"
)

// Defaults, kube-proxy's where it has the field.
const (
	DefaultMode             = ProxyModeNFTables
	DefaultIPFamilyPolicy   = PreferDualStack
	DefaultSyncPeriod       = 30 * time.Second
	DefaultMinSyncPeriod    = time.Second
	DefaultConfigSyncPeriod = 15 * time.Minute
	DefaultDetectLocalMode  = LocalModeClusterCIDR

	// The health and metrics servers listen on the IPv6 addresses instead
	// when the first nodeIPOverride is IPv6, as kube-proxy's do when its
	// bindAddress is.
	DefaultHealthzBindAddress     = "0.0.0.0:10256"
	DefaultHealthzBindAddressIPv6 = "[::]:10256"
	DefaultMetricsBindAddress     = "127.0.0.1:10249"
	DefaultMetricsBindAddressIPv6 = "[::1]:10249"

	DefaultContentType = "application/vnd.kubernetes.protobuf"
	DefaultQPS         = 5
	DefaultBurst       = 10

	DefaultOOMScoreAdj           = -999
	DefaultConntrackMaxPerCore   = 32 * 1024
	DefaultConntrackMin          = 128 * 1024
	DefaultTCPEstablishedTimeout = 24 * time.Hour
	DefaultTCPCloseWaitTimeout   = time.Hour

	DefaultFailurePolicy = KeepLastGood
	// The module limits are host/runtime's defaults, written out.
	DefaultModuleMemory  = 256 << 20
	DefaultModuleTimeout = 2 * time.Second
)

// SetDefaults fills in every field of c that is not given, and normalises
// empty lists and maps to absent ones, so that a defaulted configuration
// written out and read back is the same.
func SetDefaults(c *WaspConfiguration) {
	c.APIVersion, c.Kind = SchemeGroupVersion.String(), Kind

	cc := &c.ClientConnection
	if cc.ContentType == "" {
		cc.ContentType = DefaultContentType
	}
	if cc.QPS == 0 {
		cc.QPS = DefaultQPS
	}
	if cc.Burst == 0 {
		cc.Burst = DefaultBurst
	}

	if c.IPFamilyPolicy == "" {
		c.IPFamilyPolicy = DefaultIPFamilyPolicy
	}
	if c.Mode == "" {
		c.Mode = DefaultMode
	}
	setDuration(&c.SyncPeriod, DefaultSyncPeriod)
	if c.MinSyncPeriod == nil {
		c.MinSyncPeriod = &metav1.Duration{Duration: DefaultMinSyncPeriod}
	}
	setDuration(&c.ConfigSyncPeriod, DefaultConfigSyncPeriod)
	if c.DetectLocalMode == "" {
		c.DetectLocalMode = DefaultDetectLocalMode
	}
	if len(c.NodePortAddresses) == 0 {
		c.NodePortAddresses = DefaultNodePortAddresses(c.Mode)
	}

	healthz, metrics := DefaultHealthzBindAddress, DefaultMetricsBindAddress
	if len(c.NodeIPOverride) > 0 {
		if ip, err := netip.ParseAddr(c.NodeIPOverride[0]); err == nil && !ip.Unmap().Is4() {
			healthz, metrics = DefaultHealthzBindAddressIPv6, DefaultMetricsBindAddressIPv6
		}
	}
	setString(&c.HealthzBindAddress, healthz)
	setString(&c.MetricsBindAddress, metrics)
	setBool(&c.ConfigHardFail, true)

	lc := &c.Linux
	setInt32(&lc.OOMScoreAdj, DefaultOOMScoreAdj)
	setInt32(&lc.Conntrack.MaxPerCore, DefaultConntrackMaxPerCore)
	setInt32(&lc.Conntrack.Min, DefaultConntrackMin)
	setDurationPtr(&lc.Conntrack.TCPEstablishedTimeout, DefaultTCPEstablishedTimeout)
	setDurationPtr(&lc.Conntrack.TCPCloseWaitTimeout, DefaultTCPCloseWaitTimeout)

	setInt32(&c.NFTables.MasqueradeBit, backends.DefaultMasqueradeBit)
	setInt32(&c.IPTables.MasqueradeBit, backends.DefaultMasqueradeBit)
	setBool(&c.IPTables.LocalhostNodePorts, false)
	setInt32(&c.IPVS.MasqueradeBit, backends.DefaultMasqueradeBit)

	for i := range c.Modules {
		m := &c.Modules[i]
		if string(m.Config) == "null" {
			m.Config = nil
		}
		if m.Limits.Memory == nil {
			m.Limits.Memory = resource.NewQuantity(DefaultModuleMemory, resource.BinarySI)
		}
		setDurationPtr(&m.Limits.Timeout, DefaultModuleTimeout)
		if m.FailurePolicy == "" {
			m.FailurePolicy = DefaultFailurePolicy
		}
	}

	// Absent, not empty: both read back as absent.
	if len(c.NodeIPOverride) == 0 {
		c.NodeIPOverride = nil
	}
	if len(c.DetectLocal.ClusterCIDRs) == 0 {
		c.DetectLocal.ClusterCIDRs = nil
	}
	if len(c.IPVS.ExcludeCIDRs) == 0 {
		c.IPVS.ExcludeCIDRs = nil
	}
	if len(c.FeatureGates) == 0 {
		c.FeatureGates = nil
	}
	if len(c.Modules) == 0 {
		c.Modules = nil
	}
}

// DefaultNodePortAddresses returns the nodePortAddresses of mode when
// none are given, kube-proxy's: the node's primary IPs for nftables, every
// local address (0.0.0.0/0 and ::/0) for iptables.
func DefaultNodePortAddresses(mode ProxyMode) []string {
	if mode == ProxyModeIPTables {
		return []string{"0.0.0.0/0", "::/0"}
	}
	return []string{NodePortAddressesPrimary}
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func setDurationPtr(d **metav1.Duration, def time.Duration) {
	if *d == nil {
		*d = &metav1.Duration{Duration: def}
	}
}

func setInt32(p **int32, def int32) {
	if *p == nil {
		*p = &def
	}
}

func setBool(p **bool, def bool) {
	if *p == nil {
		*p = &def
	}
}

func setString(p **string, def string) {
	if *p == nil {
		*p = &def
	}
}
