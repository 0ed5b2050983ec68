package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceCIDR and ServiceCIDR6 form the dual-stack
// --service-cluster-ip-range of every control plane. No traffic is ever
// sent to them from the host.
const (
	ServiceCIDR  = "10.96.0.0/16"
	ServiceCIDR6 = "fd00:10:96::/112"
)

const (
	// readyTimeout bounds each of etcd's and kube-apiserver's start-up;
	// both are ready in a few seconds on two cores.
	readyTimeout = 2 * time.Minute
	// stopGrace is how long a process may take to exit after SIGTERM
	// before it is killed.
	stopGrace = 10 * time.Second
)

// ControlPlane is a running etcd and kube-apiserver on 127.0.0.1.
type ControlPlane struct {
	// Kubeconfig is the path of a self-contained kubeconfig for the
	// cluster administrator (O=system:masters).
	Kubeconfig string
	// RESTConfig is the administrator's client configuration. Tests may
	// copy it with rest.CopyConfig and change QPS and Burst.
	RESTConfig *rest.Config

	// ProxyKubeconfig and ProxyRESTConfig authenticate as
	// system:kube-proxy, which bootstrap RBAC binds to the
	// system:node-proxier ClusterRole: exactly what a service proxy may do
	// in a real cluster.
	ProxyKubeconfig string
	ProxyRESTConfig *rest.Config

	Host    string // https://127.0.0.1:<port> of kube-apiserver
	EtcdURL string // http://127.0.0.1:<port> of etcd
	// Dir holds certificates, logs (etcd.log, kube-apiserver.log) and the
	// etcd data; it is removed when the test ends.
	Dir string

	// mu guards apiserver and restarts, which StopAPIServer and
	// StartAPIServer change.
	mu        sync.Mutex
	apiserver *process
	apiBin    string
	apiArgs   []string
	apiReady  func() bool
	restarts  int
}

// Enabled reports whether end-to-end tests were asked for (WASP_E2E=1).
func Enabled() bool { return os.Getenv("WASP_E2E") == "1" }

// Start builds the binaries if needed (see Build), then starts etcd and
// kube-apiserver on free loopback ports and waits until the apiserver's
// /readyz is ok. It skips t unless WASP_E2E=1, and fails t on any error.
// t.Cleanup stops both processes by PID and removes their directory, also
// when the test fails; then the tails of their logs are logged.
func Start(ctx context.Context, t testing.TB) *ControlPlane {
	t.Helper()
	if !Enabled() {
		t.Skip("end-to-end test: set WASP_E2E=1 to run it (the first run builds etcd and kube-apiserver, about 5 minutes and 2-3 GB of Go caches)")
	}
	start := time.Now()
	bins, err := Build(ctx)
	if err != nil {
		t.Fatalf("build control plane binaries: %v", err)
	}
	t.Logf("binaries ready in %s (cache %s)", time.Since(start).Round(time.Millisecond), bins.Dir)

	cp := &ControlPlane{Dir: t.TempDir()} // removed after the processes are stopped
	creds, err := newPKI()
	if err != nil {
		t.Fatalf("generate certificates: %v", err)
	}
	pkiDir := filepath.Join(cp.Dir, "pki")
	if err := creds.write(pkiDir); err != nil {
		t.Fatalf("write certificates: %v", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("pick loopback ports: %v", err)
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	cp.EtcdURL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(etcdPort))
	cp.Host = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(apiPort))

	// etcd
	t0 := time.Now()
	peerURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))
	etcd, err := startProcess(bins.Etcd, filepath.Join(cp.Dir, "etcd.log"),
		"--name", "wasp-e2e",
		"--data-dir", filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls", cp.EtcdURL, "--advertise-client-urls", cp.EtcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "wasp-e2e="+peerURL,
		// throwaway data: skipping fsync makes every write much cheaper
		"--unsafe-no-fsync",
		"--log-level", "warn",
	)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { etcd.stop(t) })
	httpClient := &http.Client{Timeout: 2 * time.Second}
	if err := etcd.waitReady(ctx, func() bool {
		body, err := get(httpClient, cp.EtcdURL+"/health")
		return err == nil && strings.Contains(body, `"health":"true"`)
	}); err != nil {
		t.Fatalf("etcd: %v", err)
	}
	t1 := time.Now()

	// kube-apiserver
	cp.apiBin = bins.KubeAPIServer
	cp.apiArgs = []string{
		"--etcd-servers", cp.EtcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(apiPort),
		"--cert-dir", filepath.Join(cp.Dir, "apiserver-certs"),
		"--tls-cert-file", filepath.Join(pkiDir, serverCertFile),
		"--tls-private-key-file", filepath.Join(pkiDir, serverKeyFile),
		"--client-ca-file", filepath.Join(pkiDir, caCertFile),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(pkiDir, saPublicKeyFile),
		"--service-account-signing-key-file", filepath.Join(pkiDir, saPrivateKeyFile),
		"--service-cluster-ip-range", ServiceCIDR + "," + ServiceCIDR6,
		"--authorization-mode", "RBAC",
		// As kubeadm's: a node proxy's DaemonSet has a privileged init
		// container (deploy/), which the default refuses.
		"--allow-privileged=true",
		// Otherwise the apiserver publishes its advertise address as the
		// endpoint of the "kubernetes" Service, and loopback endpoints are
		// invalid.
		"--endpoint-reconciler-type", "none",
	}
	apiserver, err := startProcess(cp.apiBin, filepath.Join(cp.Dir, "kube-apiserver.log"), cp.apiArgs...)
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	cp.apiserver = apiserver
	t.Cleanup(func() {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if cp.apiserver == nil {
			return
		}
		cp.apiserver.stop(t)
		if t.Failed() {
			t.Logf("kube-apiserver log (last lines of %s):\n%s", cp.apiserver.logPath, cp.apiserver.logTail(40))
			t.Logf("etcd log (last lines of %s):\n%s", etcd.logPath, etcd.logTail(20))
		}
	})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(creds.CA)
	adminTLS, err := tls.X509KeyPair(creds.AdminCert, creds.AdminKey)
	if err != nil {
		t.Fatalf("admin key pair: %v", err)
	}
	apiClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{adminTLS}},
	}}
	cp.apiReady = func() bool {
		defer apiClient.CloseIdleConnections()
		body, err := get(apiClient, cp.Host+"/readyz")
		return err == nil && body == "ok"
	}
	if err := apiserver.waitReady(ctx, cp.apiReady); err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	t2 := time.Now()
	t.Logf("etcd %s ready in %s, kube-apiserver %s ready in %s at %s",
		EtcdVersion, t1.Sub(t0).Round(time.Millisecond), KubernetesVersion, t2.Sub(t1).Round(time.Millisecond), cp.Host)

	cp.RESTConfig = restConfig(cp.Host, creds.CA, creds.AdminCert, creds.AdminKey)
	cp.ProxyRESTConfig = restConfig(cp.Host, creds.CA, creds.ProxyCert, creds.ProxyKey)
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	cp.ProxyKubeconfig = filepath.Join(cp.Dir, "kube-proxy.kubeconfig")
	for _, kc := range []struct {
		path, user string
		cert, key  []byte
	}{
		{cp.Kubeconfig, adminUser, creds.AdminCert, creds.AdminKey},
		{cp.ProxyKubeconfig, kubeProxyUser, creds.ProxyCert, creds.ProxyKey},
	} {
		if err := writeKubeconfig(kc.path, cp.Host, kc.user, creds.CA, kc.cert, kc.key); err != nil {
			t.Fatalf("write kubeconfig: %v", err)
		}
	}
	return cp
}

func restConfig(host string, ca, cert, key []byte) *rest.Config {
	return &rest.Config{
		Host:            host,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: cert, KeyData: key},
	}
}

// writeKubeconfig writes a kubeconfig with all credentials embedded, so it
// stays valid wherever it is copied (into a network namespace, say).
func writeKubeconfig(path, host, user string, ca, cert, key []byte) error {
	const name = "wasp-e2e"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. Another process
// may take one before it is used; the start-up then fails with a clear error.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after 10 s) and
// leaves etcd running: an apiserver outage. Every client then gets
// connection refused until StartAPIServer. Stopping a stopped apiserver
// does nothing.
func (cp *ControlPlane) StopAPIServer(t testing.TB) {
	t.Helper()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver == nil {
		return
	}
	cp.apiserver.stop(t)
	cp.apiserver = nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port with the same flags and certificates, and waits for its
// /readyz; each start logs to its own file (kube-apiserver-2.log, ...).
// It fails t if the apiserver is running or does not become ready.
func (cp *ControlPlane) StartAPIServer(ctx context.Context, t testing.TB) {
	t.Helper()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver != nil {
		t.Fatal("start kube-apiserver: it is running")
	}
	cp.restarts++
	log := filepath.Join(cp.Dir, fmt.Sprintf("kube-apiserver-%d.log", cp.restarts+1))
	p, err := startProcess(cp.apiBin, log, cp.apiArgs...)
	if err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	cp.apiserver = p
	if err := p.waitReady(ctx, cp.apiReady); err != nil {
		t.Fatalf("restarted kube-apiserver: %v", err)
	}
}
