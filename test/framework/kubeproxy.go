//go:build linux

package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// kubeProxyConfig is upstream kube-proxy's configuration for tests: the
// mode asked for, nothing host-global touched (conntrack sysctls left
// alone, oomScoreAdj 0), metrics and healthz on loopback of its own
// namespace. Everything else is upstream's default (syncPeriod 30s).
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: %s
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
clusterCIDR: %s
minSyncPeriod: %s
detectLocalMode: ClusterCIDR
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`

// KubeProxyArgs writes a configuration file for upstream kube-proxy on
// node, in mode, reaching the apiserver through kubeconfig (one that
// ForwardAPIServer returned for node), and returns kube-proxy's flags: the
// file and -v 2 (whose log has its "SyncProxyRules complete" lines).
func (e *Env) KubeProxyArgs(node, kubeconfig, mode string, minSync time.Duration) ([]string, error) {
	cfg := filepath.Join(e.Dir, fmt.Sprintf("kube-proxy-%s-%s.yaml", node, mode))
	if err := os.WriteFile(cfg, fmt.Appendf(nil, kubeProxyConfig, mode, kubeconfig, node, ClusterCIDRs, minSync), 0o644); err != nil {
		return nil, fmt.Errorf("kube-proxy configuration: %w", err)
	}
	return []string{"--config", cfg, "--v", "2"}, nil
}
