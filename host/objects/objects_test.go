package objects

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	nodeDoc = `apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {topology.kubernetes.io/zone: zone-a}
`
	serviceDoc = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec:
  clusterIP: 10.96.0.10
  ports:
  - {name: http, port: 80, protocol: TCP}
`
	sliceDoc = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: demo
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
endpoints:
- addresses: [10.244.1.5]
  conditions: {ready: true}
  nodeName: node-a
`
)

// names returns "Kind namespace/name" for every object, in kind order.
func names(o *Objects) []string {
	var out []string
	for _, n := range o.Nodes {
		out = append(out, "Node "+n.Name)
	}
	for _, s := range o.Services {
		out = append(out, "Service "+s.Namespace+"/"+s.Name)
	}
	for _, es := range o.EndpointSlices {
		out = append(out, "EndpointSlice "+es.Namespace+"/"+es.Name)
	}
	return out
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []string
	}{
		{
			name:  "empty input",
			input: "",
		},
		{
			name:  "multi-document YAML with empty and comment-only documents",
			input: "---\n" + nodeDoc + "---\n# only a comment\n---\n" + serviceDoc + "---\n---\n" + sliceDoc + "---\n",
			want:  []string{"Node node-a", "Service demo/web", "EndpointSlice demo/web-abc"},
		},
		{
			name:  "a JSON object",
			input: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"demo"},"spec":{"clusterIP":"10.96.0.10"}}`,
			want:  []string{"Service demo/web"},
		},
		{
			name: "concatenated JSON objects",
			input: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-a"}}
{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-b"}}{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-c"}}`,
			want: []string{"Node node-a", "Node node-b", "Node node-c"},
		},
		{
			name:  "namespace defaults to default for Services and EndpointSlices",
			input: "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\n",
			want:  []string{"Service default/web", "EndpointSlice default/web-1"},
		},
		{
			name: "typed ServiceList whose items omit kind",
			input: `apiVersion: v1
kind: ServiceList
metadata: {resourceVersion: "123"}
items:
- metadata: {name: a, namespace: demo}
- apiVersion: v1
  kind: Service
  metadata: {name: b, namespace: demo}
`,
			want: []string{"Service demo/a", "Service demo/b"},
		},
		{
			name: "typed EndpointSliceList and NodeList",
			input: `apiVersion: discovery.k8s.io/v1
kind: EndpointSliceList
items:
- metadata: {name: a-1, namespace: demo, labels: {kubernetes.io/service-name: a}}
  addressType: IPv4
---
apiVersion: v1
kind: NodeList
items:
- metadata: {name: node-a}
`,
			want: []string{"Node node-a", "EndpointSlice demo/a-1"},
		},
		{
			name:  "same name, different namespaces or kinds, is no duplicate",
			input: "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: a}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: b}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: web}\n",
			want:  []string{"Node web", "Service a/web", "Service b/web"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Decode(strings.NewReader(tt.input), "objects.yaml")
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got := names(o); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("objects:\n got: %q\nwant: %q", got, tt.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	noLabelSlice := strings.Replace(sliceDoc, "  labels: {kubernetes.io/service-name: web}\n", "", 1)
	noLabelSlice = strings.Replace(noLabelSlice, "  namespace: demo\n", "", 1)

	tests := []struct {
		name  string
		input string
		want  []string // substrings of the error message, in order
		is    error    // optional: errors.Is target
		field string   // optional: the first *Error's Field
	}{
		{
			name:  "unparsable YAML",
			input: nodeDoc + "---\n" + serviceDoc + "---\nkind: Service\nmetadata: [unclosed\n",
			want:  []string{"objects.yaml: document 3: not valid YAML or JSON"},
		},
		{
			name:  "unparsable JSON",
			input: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"}} {"apiVersion": [}`,
			want:  []string{"objects.yaml: document 2: not valid YAML or JSON"},
		},
		{
			name:  "not an object",
			input: "- a\n- b\n",
			want:  []string{"objects.yaml: document 1: not an object"},
		},
		{
			name:  "missing kind",
			input: nodeDoc + "---\napiVersion: v1\nmetadata: {name: web}\n",
			want:  []string{`objects.yaml: document 2: "web": kind: required`},
			is:    ErrRequired,
			field: "kind",
		},
		{
			name:  "missing apiVersion",
			input: "kind: Service\nmetadata: {name: web}\n",
			want:  []string{`objects.yaml: document 1: Service "web": apiVersion: required`},
			is:    ErrRequired,
			field: "apiVersion",
		},
		{
			name:  "kind of the wrong type",
			input: "apiVersion: v1\nkind: 7\nmetadata: {name: web}\n",
			want:  []string{`objects.yaml: document 1: "web": kind: must be a string`},
		},
		{
			name:  "unsupported kind",
			input: "apiVersion: v1\nkind: Pod\nmetadata: {name: web-0, namespace: demo}\n",
			want:  []string{`objects.yaml: document 1: Pod "demo/web-0": kind: unsupported: v1 "Pod": want v1 Node, v1 Service or discovery.k8s.io/v1 EndpointSlice`},
			is:    ErrUnsupported,
			field: "kind",
		},
		{
			name:  "unsupported apiVersion of a supported kind",
			input: strings.Replace(sliceDoc, "discovery.k8s.io/v1", "discovery.k8s.io/v1beta1", 1),
			want:  []string{`objects.yaml: document 1: EndpointSlice "demo/web-abc": apiVersion: unsupported: "discovery.k8s.io/v1beta1" for EndpointSlice: want "discovery.k8s.io/v1"`},
			is:    ErrUnsupported,
			field: "apiVersion",
		},
		{
			name:  "invalid apiVersion",
			input: "apiVersion: a/b/c\nkind: Service\nmetadata: {name: web}\n",
			want:  []string{`document 1: Service "web": apiVersion: `},
			field: "apiVersion",
		},
		{
			name:  "EndpointSlice without the service-name label",
			input: nodeDoc + "---\n" + serviceDoc + "---\n" + noLabelSlice,
			want:  []string{`objects.yaml: document 3: EndpointSlice "web-abc": metadata.labels[kubernetes.io/service-name]: required`},
			is:    ErrRequired,
			field: "metadata.labels[kubernetes.io/service-name]",
		},
		{
			name:  "EndpointSlice with an empty service-name label",
			input: strings.Replace(sliceDoc, "kubernetes.io/service-name: web", `kubernetes.io/service-name: ""`, 1),
			want:  []string{`document 1: EndpointSlice "demo/web-abc": metadata.labels[kubernetes.io/service-name]: required`},
			is:    ErrRequired,
		},
		{
			name:  "field of the wrong type",
			input: strings.Replace(serviceDoc, "port: 80", "port: eighty", 1),
			want:  []string{`objects.yaml: document 1: Service "demo/web": spec.ports.port: want int32, got string`},
			field: "spec.ports.port",
		},
		{
			name:  "label value of the wrong type",
			input: strings.Replace(nodeDoc, "zone-a", "7", 1),
			want:  []string{`document 1: Node "node-a": metadata.labels: want string, got number`},
			field: "metadata.labels",
		},
		{
			name:  "unknown field",
			input: strings.Replace(serviceDoc, "clusterIP:", "clusterIp:", 1),
			want:  []string{`objects.yaml: document 1: Service "demo/web": spec.clusterIp: unknown field`},
			field: "spec.clusterIp",
		},
		{
			name:  "several unknown fields",
			input: strings.Replace(strings.Replace(serviceDoc, "clusterIP:", "clusterIp:", 1), "protocol: TCP", "proto: TCP", 1),
			want:  []string{`spec.clusterIp: unknown field (and 1 more: unknown field "spec.ports[0].proto")`},
			field: "spec.clusterIp",
		},
		{
			name:  "duplicate field",
			input: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"a","name":"b"}}`,
			want:  []string{`document 1: Node "b": metadata.name: duplicate field`},
			field: "metadata.name",
		},
		{
			name:  "missing name",
			input: "apiVersion: v1\nkind: Service\nmetadata: {namespace: demo}\nspec: {}\n",
			want:  []string{`objects.yaml: document 1: Service: metadata.name: required`},
			is:    ErrRequired,
			field: "metadata.name",
		},
		{
			name:  "duplicate object",
			input: serviceDoc + "---\n" + nodeDoc + "---\n" + serviceDoc,
			want:  []string{`objects.yaml: document 3: Service "demo/web": metadata.name: duplicate: also in document 1`},
			field: "metadata.name",
		},
		{
			name:  "namespace defaulted before the duplicate check",
			input: "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n",
			want:  []string{`document 2: Service "default/web": metadata.name: duplicate: also in document 1`},
		},
		{
			name: "error in a List item names the item",
			input: `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: demo}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: web-abc}
  addressType: IPv4
`,
			want:  []string{`objects.yaml: document 1: item 2: EndpointSlice "web-abc": metadata.labels[kubernetes.io/service-name]: required`},
			is:    ErrRequired,
			field: "metadata.labels[kubernetes.io/service-name]",
		},
		{
			name:  "List item without a kind",
			input: "apiVersion: v1\nkind: List\nitems:\n- metadata: {name: web}\n",
			want:  []string{`document 1: item 1: "web": kind: required`},
			is:    ErrRequired,
		},
		{
			name:  "typed list with an item of another kind",
			input: "apiVersion: v1\nkind: ServiceList\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: node-a}\n",
			want:  []string{`document 1: item 1: Node "node-a": kind: Node in a ServiceList`},
		},
		{
			name:  "typed list item with a type error",
			input: "apiVersion: v1\nkind: ServiceList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n  spec: {ports: [{port: true}]}\n",
			want:  []string{`document 1: item 2: Service "b": spec.ports.port: want int32, got bool`},
		},
		{
			name:  "list inside a list",
			input: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  items: []\n",
			want:  []string{`document 1: item 1: List: kind: unsupported: a list inside a list`},
			is:    ErrUnsupported,
		},
		{
			name:  "items not a list",
			input: "apiVersion: v1\nkind: List\nitems: {a: b}\n",
			want:  []string{`document 1: List: items: must be a list`},
		},
		{
			name:  "every problem is reported",
			input: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\n" + nodeDoc + "---\napiVersion: v1\nkind: Service\nmetadata: {namespace: demo}\n",
			want: []string{
				`objects.yaml: document 1: Pod "p": kind: unsupported`,
				"\n",
				`objects.yaml: document 3: Service: metadata.name: required`,
			},
			field: "kind",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Decode(strings.NewReader(tt.input), "objects.yaml")
			if err == nil {
				t.Fatalf("Decode succeeded with %q, want an error", names(o))
			}
			if o != nil {
				t.Errorf("Decode returned objects %q with its error", names(o))
			}
			msg := err.Error()
			rest := msg
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error %q\nwant it to contain, in order, %q", msg, tt.want)
				}
				rest = rest[i+len(w):]
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %q is no *Error", msg)
			}
			if e.Source != "objects.yaml" || e.Document == 0 {
				t.Errorf("Error has Source %q, Document %d", e.Source, e.Document)
			}
			if tt.field != "" && e.Field != tt.field {
				t.Errorf("Field = %q, want %q", e.Field, tt.field)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", msg, tt.is)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{
			name: "everything",
			err:  &Error{Source: "f.yaml", Document: 3, Item: 2, Kind: "Service", Name: "demo/web", Field: "spec.type", Err: errors.New("bad")},
			want: `f.yaml: document 3: item 2: Service "demo/web": spec.type: bad`,
		},
		{
			name: "only a document",
			err:  &Error{Source: "-", Document: 1, Err: errors.New("not an object")},
			want: `-: document 1: not an object`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

// kubectlList is what `kubectl get nodes,services,endpointslices -A -o yaml`
// prints, trimmed to a few objects.
const kubectlList = `apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    annotations:
      node.alpha.kubernetes.io/ttl: "0"
      volumes.kubernetes.io/controller-managed-attach-detach: "true"
    creationTimestamp: "2025-01-10T09:00:00Z"
    labels:
      beta.kubernetes.io/arch: amd64
      kubernetes.io/hostname: node-a
      topology.kubernetes.io/zone: zone-a
    managedFields:
    - apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1:
        f:metadata:
          f:labels:
            .: {}
            f:kubernetes.io/hostname: {}
      manager: kubelet
      operation: Update
      time: "2025-01-10T09:00:00Z"
    name: node-a
    resourceVersion: "1042"
    uid: 0b8e5b6c-8f5e-4d5a-9b1e-1f0e6f2c3a4b
  spec:
    podCIDR: 10.244.1.0/24
    podCIDRs:
    - 10.244.1.0/24
  status:
    addresses:
    - address: 198.51.100.1
      type: InternalIP
    - address: node-a
      type: Hostname
    allocatable:
      cpu: "2"
      memory: 8Gi
      pods: "110"
    capacity:
      cpu: "2"
      memory: 8Gi
      pods: "110"
    conditions:
    - lastHeartbeatTime: "2025-01-10T09:05:00Z"
      lastTransitionTime: "2025-01-10T09:00:00Z"
      message: kubelet is posting ready status
      reason: KubeletReady
      status: "True"
      type: Ready
    nodeInfo:
      architecture: amd64
      bootID: 1b2c
      containerRuntimeVersion: containerd://2.0.0
      kernelVersion: 6.6.0
      kubeProxyVersion: ""
      kubeletVersion: v1.33.0
      machineID: 3d4e
      operatingSystem: linux
      osImage: Debian GNU/Linux 12 (bookworm)
      systemUUID: 5f6a
- apiVersion: v1
  kind: Service
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"v1","kind":"Service","metadata":{"annotations":{},"name":"web","namespace":"demo"}}
    creationTimestamp: "2025-01-10T09:10:00Z"
    labels:
      app: web
    name: web
    namespace: demo
    resourceVersion: "2001"
    uid: 7a8b9c0d-1e2f-4a5b-8c6d-7e8f9a0b1c2d
  spec:
    clusterIP: 10.96.0.10
    clusterIPs:
    - 10.96.0.10
    internalTrafficPolicy: Cluster
    ipFamilies:
    - IPv4
    ipFamilyPolicy: SingleStack
    ports:
    - name: http
      port: 80
      protocol: TCP
      targetPort: 8080
    selector:
      app: web
    sessionAffinity: None
    type: ClusterIP
  status:
    loadBalancer: {}
- addressType: IPv4
  apiVersion: discovery.k8s.io/v1
  endpoints:
  - addresses:
    - 10.244.1.10
    conditions:
      ready: true
      serving: true
      terminating: false
    nodeName: node-a
    targetRef:
      kind: Pod
      name: web-6d4b9-a1
      namespace: demo
      uid: 9c0d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f
    zone: zone-a
  kind: EndpointSlice
  metadata:
    annotations:
      endpoints.kubernetes.io/last-change-trigger-time: "2025-01-10T09:10:05Z"
    creationTimestamp: "2025-01-10T09:10:00Z"
    generateName: web-
    generation: 2
    labels:
      endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
      kubernetes.io/service-name: web
    name: web-7x2kq
    namespace: demo
    ownerReferences:
    - apiVersion: v1
      blockOwnerDeletion: true
      controller: true
      kind: Service
      name: web
      uid: 7a8b9c0d-1e2f-4a5b-8c6d-7e8f9a0b1c2d
    resourceVersion: "2010"
    uid: 1e2f3a4b-5c6d-4e7f-8a9b-0c1d2e3f4a5b
  ports:
  - name: http
    port: 8080
    protocol: TCP
kind: List
metadata:
  resourceVersion: ""
`

func TestDecodeKubectlList(t *testing.T) {
	o, err := Decode(strings.NewReader(kubectlList), "cluster.yaml")
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := &Objects{
		Nodes:          []*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}},
		Services:       []*v1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}},
		EndpointSlices: []*discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-7x2kq"}}},
	}
	if got := names(o); !reflect.DeepEqual(got, names(want)) {
		t.Fatalf("objects: got %q, want %q", got, names(want))
	}
	// Spot-check that the fields were decoded, not just the names.
	if got := o.Nodes[0].Labels["topology.kubernetes.io/zone"]; got != "zone-a" {
		t.Errorf("node zone label = %q", got)
	}
	if got := o.Services[0].Spec.Ports[0].TargetPort.IntValue(); got != 8080 {
		t.Errorf("service targetPort = %d", got)
	}
	es := o.EndpointSlices[0]
	if es.AddressType != discoveryv1.AddressTypeIPv4 || len(es.Endpoints) != 1 || *es.Endpoints[0].NodeName != "node-a" ||
		!*es.Endpoints[0].Conditions.Ready || *es.Ports[0].Port != 8080 {
		t.Errorf("EndpointSlice decoded as %+v", es)
	}
	if o.Nodes[0].Kind != "Node" || o.Services[0].APIVersion != "v1" {
		t.Errorf("TypeMeta not kept: %+v %+v", o.Nodes[0].TypeMeta, o.Services[0].TypeMeta)
	}
}

func TestObjectsNode(t *testing.T) {
	o, err := Decode(strings.NewReader(nodeDoc+"---\napiVersion: v1\nkind: Node\nmetadata: {name: node-b}\n"), "objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		objects *Objects
		node    string
		wantErr string // "" for success
	}{
		{name: "present", objects: o, node: "node-b"},
		{name: "missing", objects: o, node: "node-z", wantErr: `node not found: "node-z": the input has "node-a", "node-b"`},
		{name: "no nodes at all", objects: &Objects{}, node: "node-a", wantErr: `node not found: "node-a": the input has no Node`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := tt.objects.Node(tt.node)
			if tt.wantErr == "" {
				if err != nil || n == nil || n.Name != tt.node {
					t.Fatalf("Node(%q) = %v, %v", tt.node, n, err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Node(%q) error = %v, want %q", tt.node, err, tt.wantErr)
			}
			if !errors.Is(err, ErrNodeNotFound) {
				t.Errorf("error is not ErrNodeNotFound")
			}
		})
	}
}
