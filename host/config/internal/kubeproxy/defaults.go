package kubeproxy

import (
	"net"
	"net/netip"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/backends"
)

// The ports of kube-proxy's servers.
const (
	healthzPort = 10256
	metricsPort = 10249
)

// SetDefaults applies kube-proxy's defaults (SetDefaults_KubeProxyConfiguration
// of pkg/proxy/apis/config/v1alpha1) to the fields c does not give. The
// platform defaults kube-proxy applies later (mode, detectLocalMode,
// nftables' nodePortAddresses) are the converter's business.
func SetDefaults(c *Configuration) {
	if c.BindAddress == "" {
		c.BindAddress = "0.0.0.0"
	}
	healthz, metrics := "[::]", "[::1]"
	if ip, err := netip.ParseAddr(c.BindAddress); err == nil && ip.Unmap().Is4() {
		healthz, metrics = "0.0.0.0", "127.0.0.1"
	}
	c.HealthzBindAddress = withPort(c.HealthzBindAddress, healthz, healthzPort)
	c.MetricsBindAddress = withPort(c.MetricsBindAddress, metrics, metricsPort)

	if c.OOMScoreAdj == nil {
		c.OOMScoreAdj = ptr[int32](-999)
	}
	setDuration(&c.IPTables.SyncPeriod, 30*time.Second)
	setDuration(&c.IPTables.MinSyncPeriod, time.Second)
	if c.IPTables.LocalhostNodePorts == nil {
		c.IPTables.LocalhostNodePorts = ptr(true)
	}
	setDuration(&c.IPVS.SyncPeriod, 30*time.Second) // ipvs.minSyncPeriod stays 0
	setDuration(&c.NFTables.SyncPeriod, 30*time.Second)
	setDuration(&c.NFTables.MinSyncPeriod, time.Second)

	if c.Conntrack.MaxPerCore == nil {
		c.Conntrack.MaxPerCore = ptr[int32](32 * 1024)
	}
	if c.Conntrack.Min == nil {
		c.Conntrack.Min = ptr[int32](128 * 1024)
	}
	if c.IPTables.MasqueradeBit == nil {
		c.IPTables.MasqueradeBit = ptr[int32](backends.DefaultMasqueradeBit)
	}
	if c.NFTables.MasqueradeBit == nil {
		c.NFTables.MasqueradeBit = ptr[int32](backends.DefaultMasqueradeBit)
	}
	if c.Conntrack.TCPEstablishedTimeout == nil {
		c.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: 24 * time.Hour}
	}
	if c.Conntrack.TCPCloseWaitTimeout == nil {
		c.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: time.Hour}
	}
	setDuration(&c.ConfigSyncPeriod, 15*time.Minute)

	if c.ClientConnection.ContentType == "" {
		c.ClientConnection.ContentType = "application/vnd.kubernetes.protobuf"
	}
	if c.ClientConnection.QPS == 0 {
		c.ClientConnection.QPS = 5
	}
	if c.ClientConnection.Burst == 0 {
		c.ClientConnection.Burst = 10
	}
}

// withPort is kube-proxy's defaulting of a bind address: def:port when
// empty, port appended to a bare IP, anything else as it is (validation
// rejects it).
func withPort(addr, def string, port int) string {
	if addr == "" {
		return def + ":" + strconv.Itoa(port)
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if ip := net.ParseIP(addr); ip == nil {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func ptr[T any](v T) *T { return &v }
