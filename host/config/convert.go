package config

import (
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasp-proxy/wasp/host/config/internal/kubeproxy"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
)

// modeConvertedWarning is the warning of a KubeProxyConfiguration of the
// ipvs mode, which wasp converts to nftables (KEP-5495).
const modeConvertedWarning = `mode: "ipvs": wasp runs nftables (kube-proxy's own rules are removed with kube-proxy --cleanup; ` +
	`NodePorts answer on the node's primary IPs unless nodePortAddresses says otherwise, and never on localhost)`

// fromKubeProxy converts a KubeProxyConfiguration to a WaspConfiguration:
// kube-proxy's defaults first, for the fields in is without, as kube-proxy
// would apply them, then the conversion of KEP-784's v1alpha2 (the
// per-mode sync periods and masqueradeAll chosen by mode, clusterCIDR
// split, bindAddress as nodeIPOverride). The mode is kept: no mode is
// kube-proxy's default, iptables; ipvs becomes nftables, its successor
// (KEP-5495). The fields wasp does not use are warnings. in is defaulted
// in place.
func fromKubeProxy(in *kubeproxy.Configuration) (*v1alpha1.WaspConfiguration, Warnings) {
	var w Warnings
	kubeproxy.SetDefaults(in)
	out := &v1alpha1.WaspConfiguration{
		ClientConnection: v1alpha1.ClientConnectionConfiguration{
			Kubeconfig:  in.ClientConnection.Kubeconfig,
			ContentType: in.ClientConnection.ContentType,
			QPS:         in.ClientConnection.QPS,
			Burst:       in.ClientConnection.Burst,
		},
		HostnameOverride:   in.HostnameOverride,
		Mode:               v1alpha1.ProxyMode(in.Mode),
		ConfigSyncPeriod:   in.ConfigSyncPeriod,
		DetectLocalMode:    v1alpha1.LocalMode(in.DetectLocalMode),
		NodePortAddresses:  in.NodePortAddresses,
		HealthzBindAddress: &in.HealthzBindAddress,
		MetricsBindAddress: &in.MetricsBindAddress,
		EnableProfiling:    in.EnableProfiling,
		FeatureGates:       in.FeatureGates,
		Linux: v1alpha1.LinuxConfiguration{
			Conntrack:   in.Conntrack,
			OOMScoreAdj: in.OOMScoreAdj,
		},
		Windows:  v1alpha1.WindowsConfiguration{RunAsService: in.WindowsRunAsService},
		NFTables: v1alpha1.NFTablesConfiguration{MasqueradeBit: in.NFTables.MasqueradeBit},
		IPTables: v1alpha1.IPTablesConfiguration{
			MasqueradeBit:      in.IPTables.MasqueradeBit,
			LocalhostNodePorts: in.IPTables.LocalhostNodePorts,
		},
		IPVS: v1alpha1.IPVSConfiguration{
			// kube-proxy's ipvs mode marks with iptables.masqueradeBit.
			MasqueradeBit: in.IPTables.MasqueradeBit,
			Scheduler:     in.IPVS.Scheduler,
			ExcludeCIDRs:  in.IPVS.ExcludeCIDRs,
			StrictARP:     in.IPVS.StrictARP,
			TCPTimeout:    in.IPVS.TCPTimeout,
			TCPFinTimeout: in.IPVS.TCPFinTimeout,
			UDPTimeout:    in.IPVS.UDPTimeout,
		},
		DetectLocal: v1alpha1.DetectLocalConfiguration{
			BridgeInterface:     in.DetectLocal.BridgeInterface,
			InterfaceNamePrefix: in.DetectLocal.InterfaceNamePrefix,
		},
	}

	// kube-proxy's platform defaults, then the sections mode chooses.
	switch v1alpha1.ProxyMode(in.Mode) {
	case "":
		// What the operator had, they keep: kube-proxy's default mode.
		in.Mode = string(v1alpha1.ProxyModeIPTables)
		out.Mode = v1alpha1.ProxyModeIPTables
	case v1alpha1.ProxyModeIPVS:
		// The node moves to nftables with wasp: converting is the
		// migration's first step, not a config wasp could not run.
		out.Mode = v1alpha1.ProxyModeNFTables
		w = append(w, modeConvertedWarning, `mode: "ipvs" is deprecated (KEP-5495): its successor is nftables`)
		// The bit the node's other packet handlers already leave alone.
		out.NFTables.MasqueradeBit = in.IPTables.MasqueradeBit
	}
	if in.DetectLocalMode == "" {
		out.DetectLocalMode = v1alpha1.LocalModeClusterCIDR
	}
	var sync, minSync metav1.Duration
	switch v1alpha1.ProxyMode(in.Mode) {
	case v1alpha1.ProxyModeIPVS:
		sync, minSync = in.IPVS.SyncPeriod, in.IPVS.MinSyncPeriod
	case v1alpha1.ProxyModeNFTables:
		sync, minSync = in.NFTables.SyncPeriod, in.NFTables.MinSyncPeriod
	default: // iptables, and kube-proxy's default mode
		sync, minSync = in.IPTables.SyncPeriod, in.IPTables.MinSyncPeriod
	}
	out.SyncPeriod, out.MinSyncPeriod = sync, &minSync
	if v1alpha1.ProxyMode(in.Mode) == v1alpha1.ProxyModeNFTables {
		out.Linux.MasqueradeAll = in.NFTables.MasqueradeAll
	} else {
		out.Linux.MasqueradeAll = in.IPTables.MasqueradeAll
	}
	if len(out.NodePortAddresses) == 0 {
		// kube-proxy's default by mode: nftables answers on the primary
		// IPs, iptables on every local address.
		out.NodePortAddresses = v1alpha1.DefaultNodePortAddresses(out.Mode)
	}
	if in.ClusterCIDR != "" {
		out.DetectLocal.ClusterCIDRs = strings.Split(in.ClusterCIDR, ",")
	}
	// bindAddress is kube-proxy's override of the node's primary IP; the
	// unspecified address (its default) overrides nothing.
	if ip, err := netip.ParseAddr(in.BindAddress); err != nil || !ip.IsUnspecified() {
		out.NodeIPOverride = []string{in.BindAddress}
	}

	ignored := func(field, why string) { w = append(w, field+": ignored: "+why) }
	if in.ClientConnection.AcceptContentTypes != "" {
		ignored("clientConnection.acceptContentTypes", "wasp's client accepts its content type")
	}
	if lg := in.Logging; lg.Verbosity != 0 || len(lg.VModule) > 0 || (lg.Format != "" && lg.Format != "text") {
		ignored("logging", "wasp logs with klog's text format; give -v on the command line")
	}
	if in.BindAddressHardFail {
		ignored("bindAddressHardFail", "wasp retries a server that cannot listen every 5s")
	}
	if in.ShowHiddenMetricsForVersion != "" {
		ignored("showHiddenMetricsForVersion", "wasp has no hidden metrics")
	}
	if in.Winkernel != (kubeproxy.WinkernelConfiguration{}) {
		ignored("winkernel", "wasp has no Windows dataplane")
	}
	if in.PortRange != "" {
		ignored("portRange", "it configured the userspace proxy, which is gone")
	}
	return out, w
}
