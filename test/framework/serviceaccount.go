//go:build linux

package framework

import (
	"context"
	"fmt"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// ServiceAccountKubeconfig mints a token for the ServiceAccount
// namespace/name through the TokenRequest API, as the kubelet does for a
// pod, and returns:
//   - the path of a kubeconfig that authenticates with it and points where
//     Kubeconfig points (the apiserver forwarder inside the proxy node's
//     namespace), for a proxy run as that ServiceAccount;
//   - a client configuration with the same token for the test itself, on
//     the host's loopback.
//
// The token lives for an hour.
func (e *Env) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, *rest.Config, error) {
	tr, err := e.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	token := tr.Status.Token

	cfg, err := clientcmd.LoadFromFile(e.Kubeconfig)
	if err != nil {
		return "", nil, err
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{user: {Token: token}}
	for _, c := range cfg.Contexts {
		c.AuthInfo = user
	}
	path := filepath.Join(e.Dir, namespace+"-"+name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", nil, err
	}

	rc := rest.AnonymousClientConfig(e.CP.RESTConfig)
	rc.BearerToken = token
	return path, rc, nil
}
