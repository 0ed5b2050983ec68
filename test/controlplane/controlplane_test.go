package controlplane

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestControlPlane creates the objects a service proxy watches, the way the
// end-to-end tests do without kubelet and controllers, and reads them back.
func TestControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cp := Start(ctx, t)

	client, err := kubernetes.NewForConfig(cp.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The kubeconfig file must work on its own, as for kubectl or wasp.
	fromFile, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", cp.Kubeconfig, err)
	}
	if v, err := kubernetes.NewForConfigOrDie(fromFile).Discovery().ServerVersion(); err != nil {
		t.Fatalf("server version through the kubeconfig: %v", err)
	} else if v.GitVersion != KubernetesVersion {
		t.Errorf("server version %q, want %q", v.GitVersion, KubernetesVersion)
	}

	// Node: addresses live in the status subresource.
	node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.10"}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update node status: %v", err)
	}

	const ns = "default"
	svc, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	cidr := netip.MustParsePrefix(ServiceCIDR)
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err != nil || !cidr.Contains(ip) {
		t.Errorf("service ClusterIP %q not in %s", svc.Spec.ClusterIP, cidr)
	}

	ready := true
	port := int32(8080)
	_, err = client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-1",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   "e2e.wasp-proxy.io",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"203.0.113.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node.Name,
		}},
		Ports: []discoveryv1.EndpointPort{{Name: new("http"), Port: &port, Protocol: new(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create endpointslice: %v", err)
	}

	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	if len(nodes.Items) != 1 || len(nodes.Items[0].Status.Addresses) != 1 || nodes.Items[0].Status.Addresses[0].Address != "198.51.100.10" {
		t.Errorf("nodes = %+v, want node-a with address 198.51.100.10", nodes.Items)
	}
	// The "kubernetes" Service exists too; look for ours by name.
	svcs, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=web"})
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	if len(svcs.Items) != 1 || svcs.Items[0].Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Errorf("services named web = %+v, want one with ClusterIP %s", svcs.Items, svc.Spec.ClusterIP)
	}
	slices, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil {
		t.Fatalf("list endpointslices: %v", err)
	}
	if len(slices.Items) != 1 || len(slices.Items[0].Endpoints) != 1 || slices.Items[0].Endpoints[0].Addresses[0] != "203.0.113.5" {
		t.Errorf("endpointslices for web = %+v, want one with endpoint 203.0.113.5", slices.Items)
	}

	// The kube-proxy identity may read, but not write, what it proxies.
	proxy := kubernetes.NewForConfigOrDie(cp.ProxyRESTConfig)
	if _, err := proxy.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list endpointslices as %s: %v", kubeProxyUser, err)
	}
	if err := proxy.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err == nil {
		t.Errorf("%s deleted a service; RBAC is not enforced", kubeProxyUser)
	}

	// An outage: stopped, the apiserver refuses; started again on the
	// same port, it serves what etcd kept.
	cp.StopAPIServer(t)
	if _, err := client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("the apiserver answered while stopped")
	}
	cp.StartAPIServer(ctx, t)
	got, err := client.CoreV1().Services(ns).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil || got.Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Fatalf("after the apiserver restarted: %v %v, want service web with ClusterIP %s", got, err, svc.Spec.ClusterIP)
	}
}
