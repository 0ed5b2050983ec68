package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/wasp-proxy/wasp/host/config"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
	"github.com/wasp-proxy/wasp/host/oci"
	"github.com/wasp-proxy/wasp/host/reload"
	"github.com/wasp-proxy/wasp/internal/localfile"
)

// configFlags are the flags that set a field of the configuration: without
// --config they build it, with --config they are ignored, with a warning,
// as kube-proxy's. --hostname-override is not one of them: it wins over
// the file.
var configFlags = []struct{ flag, field string }{
	{"kubeconfig", "clientConnection.kubeconfig"},
	{"bind-address", "nodeIPOverride"},
	{"proxy-mode", "mode"},
	{"sync-period", "syncPeriod"},
	{"min-sync-period", "minSyncPeriod"},
	{"config-sync-period", "configSyncPeriod"},
	{"cluster-cidr", "detectLocal.clusterCIDRs"},
	{"nodeport-addresses", "nodePortAddresses"},
	{"healthz-bind-address", "healthzBindAddress"},
	{"metrics-bind-address", "metricsBindAddress"},
	{"profiling-bind-address", "profilingBindAddress"},
	{"masquerade-all", "linux.masqueradeAll"},
	{"iptables-masquerade-bit", "iptables.masqueradeBit"},
	{"iptables-localhost-nodeports", "iptables.localhostNodePorts"},
	{"oom-score-adj", "linux.oomScoreAdj"},
	{"conntrack-max-per-core", "linux.conntrack.maxPerCore"},
	{"conntrack-min", "linux.conntrack.min"},
	{"conntrack-tcp-timeout-established", "linux.conntrack.tcpEstablishedTimeout"},
	{"conntrack-tcp-timeout-close-wait", "linux.conntrack.tcpCloseWaitTimeout"},
	{"conntrack-tcp-be-liberal", "linux.conntrack.tcpBeLiberal"},
	{"conntrack-udp-timeout", "linux.conntrack.udpTimeout"},
	{"conntrack-udp-timeout-stream", "linux.conntrack.udpStreamTimeout"},
	{"module", "modules"},
	{"module-public-key", "moduleSignatures.publicKeys"},
	{"module-trusted-root", "moduleSignatures.keyless.trustedRoot"},
	{"module-certificate-identity", "moduleSignatures.keyless.identities"},
	{"module-certificate-oidc-issuer", "moduleSignatures.keyless.identities"},
	{"module-file-directory", "moduleFileDirectories"},
}

// maxConfigFileSize bounds wasp's configuration file and a module's: a
// module's configuration is at most abi.MaxConfigLen of JSON, a few of
// them and inline keys fit many times over.
const maxConfigFileSize = 16 << 20

// waspConfig returns the configuration of wasp run: the file of --config,
// or the flags. warn gets each warning: the file's, and each flag that
// --config makes wasp ignore.
func (f *runFlags) waspConfig(fs *pflag.FlagSet, warn func(string)) (*v1alpha1.WaspConfiguration, error) {
	var c *v1alpha1.WaspConfiguration
	if f.configFile != "" {
		data, err := localfile.Read(f.configFile, maxConfigFileSize)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		cfg, w, err := config.Load(data)
		for _, s := range w {
			warn(fmt.Sprintf("--config %s: %s", f.configFile, s))
		}
		if err != nil {
			return nil, fmt.Errorf("--config %s: invalid, nothing applied:%s", f.configFile, listErrors(err))
		}
		for _, cf := range configFlags {
			if fs.Changed(cf.flag) {
				warn(fmt.Sprintf("--%s is ignored: --config is given (set %s in the file)", cf.flag, cf.field))
			}
		}
		c = cfg
	}

	var errs []error
	hostname, hostnameSet := strings.ToLower(strings.TrimSpace(f.hostname)), f.hostname != ""
	if hostnameSet && hostname == "" {
		errs = append(errs, errors.New("--hostname-override: empty"))
	}
	if c != nil {
		if hostnameSet {
			c.HostnameOverride = hostname
		}
	} else {
		c = &v1alpha1.WaspConfiguration{HostnameOverride: hostname}
		if err := f.applyFlags(fs, c); err != nil {
			errs = append(errs, err)
		}
	}
	config.Default(c)
	w, verrs := config.Validate(c)
	if f.configFile == "" {
		for _, s := range w {
			warn(s)
		}
	}
	for _, e := range verrs {
		errs = append(errs, flagError(e, f.configFile != ""))
	}
	errs = append(errs, f.checkRunFlags(c)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// checkRunFlags checks the flags that are not part of the configuration,
// and what wasp run cannot do with c.
func (f *runFlags) checkRunFlags(c *v1alpha1.WaspConfiguration) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.source != "" {
		if c.ClientConnection.Kubeconfig != "" {
			bad("--source and --kubeconfig (clientConnection.kubeconfig): give one or the other")
		}
		if f.master != "" {
			bad("--source and --master: give one or the other")
		}
	}
	if f.sourcePoll < 0 {
		bad("--source-poll-interval %v: negative", f.sourcePoll)
	}
	if _, err := parseIPFamilies(f.ipFamilies); err != nil {
		errs = append(errs, err)
	}
	// The backends take bit 0 for their default.
	if b := c.NFTables.MasqueradeBit; c.Mode != v1alpha1.ProxyModeIPTables && b != nil && *b == 0 {
		bad("nftables.masqueradeBit: 0 is not supported by wasp's nftables backend: use 1 to 31")
	}
	if b := c.IPTables.MasqueradeBit; c.Mode == v1alpha1.ProxyModeIPTables && b != nil && *b == 0 {
		bad("iptables.masqueradeBit: 0 is not supported by wasp's iptables backend: use 1 to 31")
	}
	return errs
}

// applyFlags sets the fields of c that the flags given set.
func (f *runFlags) applyFlags(fs *pflag.FlagSet, c *v1alpha1.WaspConfiguration) error {
	set := fs.Changed
	if set("kubeconfig") {
		c.ClientConnection.Kubeconfig = f.kubeconfig
	}
	if set("bind-address") {
		if ip, err := netip.ParseAddr(f.bindAddress); err != nil || !ip.IsUnspecified() {
			c.NodeIPOverride = []string{f.bindAddress}
		}
	}
	if set("proxy-mode") {
		c.Mode = v1alpha1.ProxyMode(f.proxyMode)
	}
	durations := []struct {
		flag string
		v    time.Duration
		to   *metav1.Duration
	}{
		{"sync-period", f.syncPeriod, &c.SyncPeriod},
		{"config-sync-period", f.configSyncPeriod, &c.ConfigSyncPeriod},
		{"conntrack-udp-timeout", f.conntrackUDPTimeout, &c.Linux.Conntrack.UDPTimeout},
		{"conntrack-udp-timeout-stream", f.conntrackUDPStreamTimeout, &c.Linux.Conntrack.UDPStreamTimeout},
	}
	for _, d := range durations {
		if set(d.flag) {
			d.to.Duration = d.v
		}
	}
	if set("min-sync-period") {
		c.MinSyncPeriod = &metav1.Duration{Duration: f.minSyncPeriod}
	}
	if set("conntrack-tcp-timeout-established") {
		c.Linux.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: f.conntrackTCPEstablished}
	}
	if set("conntrack-tcp-timeout-close-wait") {
		c.Linux.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: f.conntrackTCPCloseWait}
	}
	if s := strings.TrimSpace(f.clusterCIDR); set("cluster-cidr") && s != "" {
		for _, part := range strings.Split(s, ",") {
			c.DetectLocal.ClusterCIDRs = append(c.DetectLocal.ClusterCIDRs, strings.TrimSpace(part))
		}
	}
	if set("nodeport-addresses") {
		c.NodePortAddresses = f.nodePortAddresses
	}
	if set("healthz-bind-address") {
		c.HealthzBindAddress = &f.healthzBindAddress
	}
	if set("metrics-bind-address") {
		c.MetricsBindAddress = &f.metricsBindAddress
	}
	c.ProfilingBindAddress = f.profilingBindAddress
	c.Linux.MasqueradeAll = f.masqueradeAll
	if set("iptables-masquerade-bit") {
		c.IPTables.MasqueradeBit = &f.iptablesMasqueradeBit
	}
	if set("iptables-localhost-nodeports") {
		c.IPTables.LocalhostNodePorts = &f.iptablesLocalhostNodePorts
	}
	c.Linux.Conntrack.TCPBeLiberal = f.conntrackTCPBeLiberal
	for _, v := range []struct {
		flag string
		v    int32
		to   **int32
	}{
		{"oom-score-adj", f.oomScoreAdj, &c.Linux.OOMScoreAdj},
		{"conntrack-max-per-core", f.conntrackMaxPerCore, &c.Linux.Conntrack.MaxPerCore},
		{"conntrack-min", f.conntrackMin, &c.Linux.Conntrack.Min},
	} {
		if set(v.flag) {
			*v.to = &v.v
		}
	}

	var errs []error
	for _, m := range f.modules {
		stage, src, ok := strings.Cut(m, "=")
		if !ok || src == "" {
			errs = append(errs, fmt.Errorf("--module %q: want STAGE=SOURCE, e.g. endpoint-selection=./module.wasm", m))
			continue
		}
		// A plain path, as --module takes it, is a file:// source.
		if !strings.Contains(src, "://") && !strings.HasPrefix(src, "builtin:") {
			abs, err := filepath.Abs(src)
			if err != nil {
				errs = append(errs, fmt.Errorf("--module %q: %w", m, err))
				continue
			}
			src = "file://" + filepath.ToSlash(abs)
		}
		c.Modules = append(c.Modules, v1alpha1.ModuleConfiguration{Stage: stage, Source: src})
	}
	c.ModuleFileDirectories = f.moduleFileDirs
	if len(f.moduleKeys) > 0 || f.moduleTrustedRoot != "" || f.moduleIdentity != "" || f.moduleIssuer != "" {
		c.ModuleSignatures = &v1alpha1.ModuleSignatures{PublicKeys: f.moduleKeys}
		if f.moduleTrustedRoot != "" || f.moduleIdentity != "" || f.moduleIssuer != "" {
			c.ModuleSignatures.Keyless = &v1alpha1.KeylessSignatures{TrustedRoot: f.moduleTrustedRoot,
				Identities: []v1alpha1.CertificateIdentity{{Issuer: f.moduleIssuer, Subject: f.moduleIdentity}}}
		}
	}
	return errors.Join(errs...)
}

// flagError names the flag that sets e's field when the flags built the
// configuration.
func flagError(e *field.Error, fromFile bool) error {
	if fromFile {
		return e
	}
	if e.Field == "hostnameOverride" {
		return fmt.Errorf("--hostname-override: %w", e)
	}
	for _, cf := range configFlags {
		if rest, ok := strings.CutPrefix(e.Field, cf.field); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return fmt.Errorf("--%s: %w", cf.flag, e)
		}
	}
	return e
}

// listErrors renders the errors of an aggregate one per line.
func listErrors(err error) string {
	var b strings.Builder
	var agg interface{ Errors() []error }
	if errors.As(err, &agg) {
		for _, e := range agg.Errors() {
			b.WriteString("\n  " + e.Error())
		}
		return b.String()
	}
	return "\n  " + err.Error()
}

// writeConfig writes c to path as YAML, as --write-config-to.
func writeConfig(c *v1alpha1.WaspConfiguration, path string) error {
	out, err := config.Marshal(c)
	if err != nil {
		return fmt.Errorf("--write-config-to: %w", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("--write-config-to: %w", err)
	}
	return nil
}

// newRunConfig turns a valid configuration and the flags that are not part
// of it into what run needs. hostname is the host's name, the default node
// name.
func newRunConfig(c *v1alpha1.WaspConfiguration, f *runFlags, hostname func() (string, error)) (*runConfig, error) {
	rc := &runConfig{
		config:     c,
		kubeconfig: c.ClientConnection.Kubeconfig, master: f.master,
		qps: c.ClientConnection.QPS, burst: int(c.ClientConnection.Burst), contentType: c.ClientConnection.ContentType,
		source: f.source, sourcePoll: f.sourcePoll,
		nodeName:             c.HostnameOverride,
		ipFamilyPolicy:       c.IPFamilyPolicy,
		mode:                 c.Mode,
		masqueradeAll:        c.Linux.MasqueradeAll,
		masqueradeBit:        int(*c.NFTables.MasqueradeBit),
		localhostNodePorts:   localhostNodePorts(c),
		tcpBeLiberal:         c.Linux.Conntrack.TCPBeLiberal,
		syncPeriod:           c.SyncPeriod.Duration,
		minSyncPeriod:        c.MinSyncPeriod.Duration,
		configSyncPeriod:     c.ConfigSyncPeriod.Duration,
		healthzBindAddress:   *c.HealthzBindAddress,
		metricsBindAddress:   *c.MetricsBindAddress,
		enableProfiling:      c.EnableProfiling,
		profilingBindAddress: c.ProfilingBindAddress,
		cacheDir:             f.cacheDir,
		cleanup:              f.cleanup,
		initOnly:             f.initOnly,
	}
	if c.Mode == v1alpha1.ProxyModeIPTables {
		rc.masqueradeBit = int(*c.IPTables.MasqueradeBit)
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch f.moduleExecution {
	case moduleExecutionWorker, "": // "": a runFlags not from the command line
	case moduleExecutionInProcess:
		rc.modulesInProcess = true
	default:
		bad("--module-execution: %q is not %q or %q", f.moduleExecution, moduleExecutionWorker, moduleExecutionInProcess)
	}
	if rc.nodeName == "" {
		h, err := hostname()
		if err != nil {
			bad("--hostname-override: not given, and the host name is unknown: %v", err)
		}
		if rc.nodeName = strings.ToLower(strings.TrimSpace(h)); rc.nodeName == "" && err == nil {
			bad("--hostname-override: not given, and the host name is empty")
		}
	}
	// Valid: they parse.
	for _, s := range c.NodeIPOverride {
		rc.nodeIPs = append(rc.nodeIPs, netip.MustParseAddr(s).Unmap())
	}
	for _, s := range c.DetectLocal.ClusterCIDRs {
		rc.clusterCIDRs = append(rc.clusterCIDRs, netip.MustParsePrefix(s).Masked())
	}
	if len(c.NodePortAddresses) == 1 && c.NodePortAddresses[0] == v1alpha1.NodePortAddressesPrimary {
		rc.nodePortPrimary = true
	} else {
		for _, s := range c.NodePortAddresses {
			rc.nodePortCIDRs = append(rc.nodePortCIDRs, netip.MustParsePrefix(s).Masked())
		}
	}

	rc.families, _ = parseIPFamilies(f.ipFamilies) // checked by checkRunFlags

	if c.ModuleSignatures != nil {
		p, err := reload.SignaturePolicy(c.ModuleSignatures)
		if err != nil {
			errs = append(errs, fmt.Errorf("moduleSignatures.%w", err))
		}
		rc.moduleSignatures = []oci.SignaturePolicy{p}
	}
	for i, m := range c.Modules {
		spec, err := reload.ModuleSpec(m, rc.moduleSignatures...)
		if err != nil {
			errs = append(errs, fmt.Errorf("modules[%d]: %w", i, err))
		}
		rc.specs = append(rc.specs, spec)
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rc, nil
}

// watchConfigFile returns a function that blocks until ctx is done (nil)
// or the file at path changes: written, created, removed or renamed (an
// error, so that wasp exits and its supervisor restarts it with the new
// file, as kube-proxy does).
func watchConfigFile(path string) (func(ctx context.Context) error, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("--config: watch: %w", err)
	}
	if err := w.Add(path); err != nil {
		w.Close()
		return nil, fmt.Errorf("--config: watch %s: %w", path, err)
	}
	return func(ctx context.Context) error {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return nil
			case ev, ok := <-w.Events:
				if !ok {
					return nil
				}
				if ev.Has(fsnotify.Write) || ev.Has(fsnotify.Create) || ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					return fmt.Errorf("--config %s changed (%s): exiting, to be restarted with it", path, ev.Op)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return nil
				}
				return fmt.Errorf("--config %s: watch: %w", path, err)
			}
		}
	}, nil
}
