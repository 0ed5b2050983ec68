package config

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/modules"
)

// maxModuleMemory is the most linear memory a 32-bit Wasm module can
// address: 65536 pages of 64 KiB.
const maxModuleMemory = 4 << 30

// Validate returns every problem of c, each with its field path, and the
// warnings about what c asks for that wasp ignores or deprecates. c is
// meant to be defaulted (Default): fields not given are not checked, but
// for syncPeriod and configSyncPeriod, whose 0 is invalid.
func Validate(c *v1alpha1.WaspConfiguration) (Warnings, field.ErrorList) {
	var (
		w    Warnings
		errs field.ErrorList
	)
	warn := func(p *field.Path, msg string) { w = append(w, p.String()+": "+msg) }

	cc := field.NewPath("clientConnection")
	if c.ClientConnection.QPS < 0 {
		errs = append(errs, field.Invalid(cc.Child("qps"), c.ClientConnection.QPS, "must be greater than or equal to 0"))
	}
	if c.ClientConnection.Burst < 0 {
		errs = append(errs, field.Invalid(cc.Child("burst"), c.ClientConnection.Burst, "must be greater than or equal to 0"))
	}

	if h := c.HostnameOverride; h != "" {
		for _, msg := range validation.IsDNS1123Subdomain(h) {
			errs = append(errs, field.Invalid(field.NewPath("hostnameOverride"), h, msg))
		}
	}
	errs = append(errs, validateNodeIPs(c.NodeIPOverride, field.NewPath("nodeIPOverride"))...)
	if p := c.IPFamilyPolicy; p != "" && !slices.Contains(ipFamilyPolicies, p) {
		errs = append(errs, field.NotSupported(field.NewPath("ipFamilyPolicy"), p, ipFamilyPolicies))
	}

	mode := field.NewPath("mode")
	switch c.Mode {
	case "", v1alpha1.ProxyModeNFTables, v1alpha1.ProxyModeIPTables:
	case v1alpha1.ProxyModeIPVS:
		warn(mode, `"ipvs" is deprecated (KEP-5495): use nftables`)
		errs = append(errs, field.Invalid(mode, c.Mode, "not implemented by wasp: use nftables or iptables"))
	default:
		errs = append(errs, field.NotSupported(mode, c.Mode, []v1alpha1.ProxyMode{v1alpha1.ProxyModeNFTables, v1alpha1.ProxyModeIPTables}))
	}

	if c.SyncPeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("syncPeriod"), c.SyncPeriod, "must be greater than 0"))
	}
	if m := c.MinSyncPeriod; m != nil {
		switch {
		case m.Duration < 0:
			errs = append(errs, field.Invalid(field.NewPath("minSyncPeriod"), *m, "must be greater than or equal to 0"))
		case c.SyncPeriod.Duration > 0 && m.Duration > c.SyncPeriod.Duration:
			errs = append(errs, field.Invalid(field.NewPath("minSyncPeriod"), *m, "must not be greater than syncPeriod"))
		}
	}
	if c.ConfigSyncPeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("configSyncPeriod"), c.ConfigSyncPeriod, "must be greater than 0"))
	}

	dlm := field.NewPath("detectLocalMode")
	switch c.DetectLocalMode {
	case "", v1alpha1.LocalModeClusterCIDR:
	case v1alpha1.LocalModeNodeCIDR, v1alpha1.LocalModeBridgeInterface, v1alpha1.LocalModeInterfaceNamePrefix:
		errs = append(errs, field.Invalid(dlm, c.DetectLocalMode, "not implemented by wasp: use ClusterCIDR"))
	default:
		errs = append(errs, field.NotSupported(dlm, c.DetectLocalMode, localModes))
	}
	errs = append(errs, validateClusterCIDRs(c.DetectLocal.ClusterCIDRs, field.NewPath("detectLocal", "clusterCIDRs"))...)
	errs = append(errs, validateNodePortAddresses(c.NodePortAddresses, field.NewPath("nodePortAddresses"))...)

	for _, a := range []struct {
		name string
		addr *string
	}{{"healthzBindAddress", c.HealthzBindAddress}, {"metricsBindAddress", c.MetricsBindAddress}, {"profilingBindAddress", &c.ProfilingBindAddress}} {
		if a.addr != nil && *a.addr != "" {
			errs = append(errs, validateHostPort(*a.addr, field.NewPath(a.name))...)
		}
	}

	if len(c.FeatureGates) > 0 {
		var names []string
		for g := range c.FeatureGates {
			if g == "" {
				errs = append(errs, field.Invalid(field.NewPath("featureGates"), g, "must not be empty"))
			}
			names = append(names, g)
		}
		slices.Sort(names)
		warn(field.NewPath("featureGates"), "ignored: wasp has no feature gates, it implements the GA behaviour of the Service gates: "+strings.Join(names, ", "))
	}

	linux := field.NewPath("linux")
	if v := c.Linux.OOMScoreAdj; v != nil && (*v < -1000 || *v > 1000) {
		errs = append(errs, field.Invalid(linux.Child("oomScoreAdj"), *v, "must be in [-1000,1000]"))
	}
	ct, ctp := c.Linux.Conntrack, linux.Child("conntrack")
	for _, v := range []struct {
		name string
		v    *int32
	}{{"maxPerCore", ct.MaxPerCore}, {"min", ct.Min}} {
		if v.v != nil && *v.v < 0 {
			errs = append(errs, field.Invalid(ctp.Child(v.name), *v.v, "must be greater than or equal to 0"))
		}
	}
	errs = append(errs, nonNegative(ctp, map[string]*metav1.Duration{
		"tcpEstablishedTimeout": ct.TCPEstablishedTimeout, "tcpCloseWaitTimeout": ct.TCPCloseWaitTimeout,
		"udpTimeout": &ct.UDPTimeout, "udpStreamTimeout": &ct.UDPStreamTimeout,
	})...)
	if c.Windows.RunAsService {
		warn(field.NewPath("windows", "runAsService"), "ignored: wasp has no Windows dataplane")
	}

	for _, b := range []struct {
		path *field.Path
		bit  *int32
	}{
		{field.NewPath("nftables", "masqueradeBit"), c.NFTables.MasqueradeBit},
		{field.NewPath("iptables", "masqueradeBit"), c.IPTables.MasqueradeBit},
		{field.NewPath("ipvs", "masqueradeBit"), c.IPVS.MasqueradeBit},
	} {
		if b.bit != nil && (*b.bit < 0 || *b.bit > 31) {
			errs = append(errs, field.Invalid(b.path, *b.bit, "must be in [0,31]"))
		}
	}
	ipvs := field.NewPath("ipvs")
	for i, s := range c.IPVS.ExcludeCIDRs {
		if _, err := netip.ParsePrefix(s); err != nil {
			errs = append(errs, field.Invalid(ipvs.Child("excludeCIDRs").Index(i), s, "must be a CIDR"))
		}
	}
	errs = append(errs, nonNegative(ipvs, map[string]*metav1.Duration{
		"tcpTimeout": &c.IPVS.TCPTimeout, "tcpFinTimeout": &c.IPVS.TCPFinTimeout, "udpTimeout": &c.IPVS.UDPTimeout,
	})...)

	errs = append(errs, validateModules(c.Modules, field.NewPath("modules"))...)
	if sig := c.ModuleSignatures; sig != nil {
		errs = append(errs, validateSignatures(sig, field.NewPath("moduleSignatures"))...)
	}
	for i, d := range c.ModuleFileDirectories {
		if !strings.HasPrefix(d, "/") || path.Clean(d) != d {
			errs = append(errs, field.Invalid(field.NewPath("moduleFileDirectories").Index(i), d, "must be a clean absolute path, e.g. /etc/wasp/modules"))
		}
	}
	return w, errs
}

var (
	ipFamilyPolicies = []v1alpha1.IPFamilyPolicy{v1alpha1.SingleStack, v1alpha1.PreferDualStack, v1alpha1.RequireDualStack}
	localModes       = []v1alpha1.LocalMode{v1alpha1.LocalModeClusterCIDR, v1alpha1.LocalModeNodeCIDR,
		v1alpha1.LocalModeBridgeInterface, v1alpha1.LocalModeInterfaceNamePrefix}
	failurePolicies = []v1alpha1.FailurePolicy{v1alpha1.KeepLastGood, v1alpha1.Builtin}
	// ociSource is oci://REPOSITORY@sha256:DIGEST: a module by digest only.
	ociSource = regexp.MustCompile(`^oci://[^@\s]+@sha256:[0-9a-f]{64}$`)
)

// nonNegative checks durations, sorted by name for a stable order.
func nonNegative(parent *field.Path, ds map[string]*metav1.Duration) field.ErrorList {
	var errs field.ErrorList
	names := make([]string, 0, len(ds))
	for n := range ds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if d := ds[n]; d != nil && d.Duration < 0 {
			errs = append(errs, field.Invalid(parent.Child(n), *d, "must be greater than or equal to 0"))
		}
	}
	return errs
}

// validateNodeIPs checks a list of IPs, at most one per family.
func validateNodeIPs(ips []string, p *field.Path) field.ErrorList {
	var (
		errs field.ErrorList
		seen = map[bool]bool{} // by "is IPv4"
	)
	for i, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Zone() != "" {
			errs = append(errs, field.Invalid(p.Index(i), s, "must be an IP address"))
			continue
		}
		if ip.IsUnspecified() {
			errs = append(errs, field.Invalid(p.Index(i), s, "must not be the unspecified address"))
		}
		if is4 := ip.Unmap().Is4(); seen[is4] {
			errs = append(errs, field.Invalid(p.Index(i), s, "must be of the other IP family: at most one IP per family"))
		} else {
			seen[is4] = true
		}
	}
	return errs
}

// validateClusterCIDRs checks one CIDR or a dual-stack pair, as kube-proxy.
func validateClusterCIDRs(cidrs []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(cidrs) > 2 {
		return field.ErrorList{field.TooMany(p, len(cidrs), 2)}
	}
	fams := map[bool]bool{}
	for i, s := range cidrs {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, field.Invalid(p.Index(i), s, "must be a CIDR, e.g. 10.244.0.0/16 or fd00:10:244::/56"))
			continue
		}
		fams[pfx.Addr().Is4()] = true
	}
	if len(errs) == 0 && len(cidrs) == 2 && len(fams) != 2 {
		errs = append(errs, field.Invalid(p, cidrs, "must be one CIDR or a dual-stack pair"))
	}
	return errs
}

// validateNodePortAddresses checks "primary" alone, or CIDRs.
func validateNodePortAddresses(addrs []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, s := range addrs {
		if s == v1alpha1.NodePortAddressesPrimary {
			if len(addrs) != 1 {
				errs = append(errs, field.Invalid(p.Index(i), s, `"primary" cannot be combined with CIDRs`))
			}
			continue
		}
		if _, err := netip.ParsePrefix(s); err != nil {
			errs = append(errs, field.Invalid(p.Index(i), s, `must be a CIDR or "primary"`))
		}
	}
	return errs
}

// validateHostPort checks IP:port. Port 0 is an ephemeral port.
func validateHostPort(addr string, p *field.Path) field.ErrorList {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return field.ErrorList{field.Invalid(p, addr, "must be IP:port")}
	}
	var errs field.ErrorList
	if ip, err := netip.ParseAddr(host); err != nil || ip.Zone() != "" {
		errs = append(errs, field.Invalid(p, addr, fmt.Sprintf("%q must be an IP address", host)))
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		errs = append(errs, field.Invalid(p, addr, fmt.Sprintf("port %q must be in [0,65535]", port)))
	}
	return errs
}

func validateModules(ms []v1alpha1.ModuleConfiguration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[abi.Stage]bool{}
	var stageNames []string
	for _, s := range abi.Stages {
		stageNames = append(stageNames, s.String())
	}
	for i, m := range ms {
		mp := p.Index(i)
		stage, ok := abi.ParseStage(m.Stage)
		switch {
		case !ok:
			errs = append(errs, field.NotSupported(mp.Child("stage"), m.Stage, stageNames))
		case seen[stage]:
			errs = append(errs, field.Duplicate(mp.Child("stage"), m.Stage))
		}
		seen[stage] = true
		errs = append(errs, validateSource(m.Source, stage, ok, mp.Child("source"))...)

		switch c := bytes.TrimSpace(m.Config); {
		case len(c) > abi.MaxConfigLen:
			errs = append(errs, field.TooLong(mp.Child("config"), "", abi.MaxConfigLen))
		case len(c) > 0 && string(c) != "null" && c[0] != '{':
			errs = append(errs, field.Invalid(mp.Child("config"), string(c), "must be an object"))
		}
		lp := mp.Child("limits")
		if q := m.Limits.Memory; q != nil && (q.Sign() <= 0 || q.CmpInt64(maxModuleMemory) > 0) {
			errs = append(errs, field.Invalid(lp.Child("memory"), q.String(), "must be in (0,4Gi]"))
		}
		if t := m.Limits.Timeout; t != nil && t.Duration <= 0 {
			errs = append(errs, field.Invalid(lp.Child("timeout"), *t, "must be greater than 0"))
		}
		if m.Limits.Instances < 0 {
			errs = append(errs, field.Invalid(lp.Child("instances"), m.Limits.Instances, "must be greater than or equal to 0 (0: GOMAXPROCS)"))
		}
		if fp := m.FailurePolicy; fp != "" && !slices.Contains(failurePolicies, fp) {
			errs = append(errs, field.NotSupported(mp.Child("failurePolicy"), fp, failurePolicies))
		}
		if g := m.Guardrails; g != nil && ok && stage != abi.StageTrafficPolicy {
			gp := mp.Child("guardrails")
			if g.AllowNotServing {
				errs = append(errs, field.Invalid(gp.Child("allowNotServing"), true, "only a traffic-policy module puts endpoints into sets"))
			}
			if g.AllowRemoteInLocal {
				errs = append(errs, field.Invalid(gp.Child("allowRemoteInLocal"), true, "only a traffic-policy module puts endpoints into sets"))
			}
		}
		if sig := m.Signatures; sig != nil {
			if !strings.HasPrefix(m.Source, "oci://") {
				errs = append(errs, field.Invalid(mp.Child("signatures"), "", "only oci:// modules carry signatures"))
			}
			errs = append(errs, validateSignatures(sig, mp.Child("signatures"))...)
		}
	}
	return errs
}

// validateSignatures checks a signatures section: at least one key or a
// keyless section, keys not blank, and each keyless identity with one
// issuer and one subject, its regular expressions valid.
func validateSignatures(sig *v1alpha1.ModuleSignatures, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(sig.PublicKeys) == 0 && sig.Keyless == nil {
		errs = append(errs, field.Required(p.Child("publicKeys"), "at least one key or a keyless section, or no signatures section"))
	}
	for j, k := range sig.PublicKeys {
		if strings.TrimSpace(k) == "" {
			errs = append(errs, field.Required(p.Child("publicKeys").Index(j), "a PEM block or the path of a file holding one"))
		}
	}
	kl := sig.Keyless
	if kl == nil {
		return errs
	}
	kp := p.Child("keyless")
	if strings.TrimSpace(kl.TrustedRoot) == "" {
		errs = append(errs, field.Required(kp.Child("trustedRoot"), "the path of a trusted_root.json, or its JSON"))
	}
	if len(kl.Identities) == 0 {
		errs = append(errs, field.Required(kp.Child("identities"), "at least one issuer and subject"))
	}
	for j, id := range kl.Identities {
		ip := kp.Child("identities").Index(j)
		for _, pair := range [][4]string{{"issuer", id.Issuer, "issuerRegExp", id.IssuerRegExp}, {"subject", id.Subject, "subjectRegExp", id.SubjectRegExp}} {
			switch {
			case pair[1] == "" && pair[3] == "":
				errs = append(errs, field.Required(ip.Child(pair[0]), "or "+pair[2]))
			case pair[1] != "" && pair[3] != "":
				errs = append(errs, field.Forbidden(ip.Child(pair[2]), "set "+pair[0]+" or "+pair[2]+", not both"))
			case pair[3] != "":
				if _, err := regexp.Compile(pair[3]); err != nil {
					errs = append(errs, field.Invalid(ip.Child(pair[2]), pair[3], err.Error()))
				}
			}
		}
	}
	return errs
}

// validateSource checks a module source; stage is checked against a
// builtin module's when stageOK.
func validateSource(src string, stage abi.Stage, stageOK bool, p *field.Path) field.ErrorList {
	switch {
	case strings.HasPrefix(src, "builtin:"):
		name := strings.TrimPrefix(src, "builtin:")
		var names []string
		for _, b := range modules.Builtins {
			if b.Name == name {
				if stageOK && b.Stage != stage {
					return field.ErrorList{field.Invalid(p, src, fmt.Sprintf("implements %s, not %s", b.Stage, stage))}
				}
				return nil
			}
			names = append(names, "builtin:"+b.Name)
		}
		return field.ErrorList{field.NotSupported(p, src, names)}
	case strings.HasPrefix(src, "file://"):
		if path := strings.TrimPrefix(src, "file://"); !strings.HasPrefix(path, "/") {
			return field.ErrorList{field.Invalid(p, src, "must be file:// and an absolute path, e.g. file:///etc/wasp/module.wasm")}
		}
		return nil
	case strings.HasPrefix(src, "oci://"):
		if !ociSource.MatchString(src) {
			return field.ErrorList{field.Invalid(p, src, "must name the module by digest: oci://REPOSITORY@sha256:DIGEST (64 hex digits)")}
		}
		return nil
	}
	return field.ErrorList{field.Invalid(p, src, "must be builtin:NAME, file:///PATH or oci://REPOSITORY@sha256:DIGEST")}
}
