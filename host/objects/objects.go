package objects

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// Objects are the Kubernetes objects read from one input, in input order.
type Objects struct {
	Nodes          []*v1.Node
	Services       []*v1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
}

// ErrNodeNotFound is returned by Objects.Node for a node not in the input.
var ErrNodeNotFound = errors.New("node not found")

// Node returns the Node called name. The error, wrapping ErrNodeNotFound,
// lists the nodes the input has.
func (o *Objects) Node(name string) (*v1.Node, error) {
	var names []string
	for _, n := range o.Nodes {
		if n.Name == name {
			return n, nil
		}
		names = append(names, fmt.Sprintf("%q", n.Name))
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: %q: the input has no Node", ErrNodeNotFound, name)
	}
	return nil, fmt.Errorf("%w: %q: the input has %s", ErrNodeNotFound, name, strings.Join(names, ", "))
}

// Error is a problem with one document or object of the input.
type Error struct {
	Source   string // the input's name, e.g. a file name
	Document int    // 1-based index of the YAML or JSON document
	Item     int    // 1-based index inside a List; 0 outside one
	Kind     string // the object's kind, when known
	Name     string // the object's name, "namespace/name" when it has a namespace; when known
	Field    string // the field's path, e.g. "spec.ports.port"; when known
	Err      error  // what is wrong
}

// Error formats the problem as
// `source: document 3: item 2: EndpointSlice "web-abc": field: problem`,
// leaving out the parts that are not known.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Document > 0 {
		fmt.Fprintf(&b, ": document %d", e.Document)
	}
	if e.Item > 0 {
		fmt.Fprintf(&b, ": item %d", e.Item)
	}
	switch {
	case e.Kind != "" && e.Name != "":
		fmt.Fprintf(&b, ": %s %q", e.Kind, e.Name)
	case e.Kind != "":
		fmt.Fprintf(&b, ": %s", e.Kind)
	case e.Name != "":
		fmt.Fprintf(&b, ": %q", e.Name)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// Unwrap returns the underlying problem.
func (e *Error) Unwrap() error { return e.Err }

// Problems an Error can wrap.
var (
	// ErrRequired: a required field is missing or empty.
	ErrRequired = errors.New("required")
	// ErrUnsupported: the kind or apiVersion is not one Decode reads.
	ErrUnsupported = errors.New("unsupported")
)

var errMustBeString = errors.New("must be a string")

// The kinds Decode reads, and the list kinds that may hold them.
var (
	gvNode          = v1.SchemeGroupVersion.WithKind("Node")
	gvService       = v1.SchemeGroupVersion.WithKind("Service")
	gvEndpointSlice = discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")

	supportedKinds = []schema.GroupVersionKind{gvNode, gvService, gvEndpointSlice}
	// listKinds maps a list kind to the kind of its items; the generic List
	// maps to the empty kind: its items must name their own.
	listKinds = map[schema.GroupVersionKind]schema.GroupVersionKind{
		v1.SchemeGroupVersion.WithKind("List"):                       {},
		v1.SchemeGroupVersion.WithKind("NodeList"):                   gvNode,
		v1.SchemeGroupVersion.WithKind("ServiceList"):                gvService,
		discoveryv1.SchemeGroupVersion.WithKind("EndpointSliceList"): gvEndpointSlice,
	}
)

// serializer decodes JSON into the supported types, rejecting unknown and
// duplicate fields.
var serializer = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("objects: building the scheme: %v", err))
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Strict: true})
}()

// Decode reads every object of r, named source in errors. On error it
// returns no object and an error joining one *Error per problem (a
// document that does not parse stops the reading).
func Decode(r io.Reader, source string) (*Objects, error) {
	d := &decoder{source: source, out: &Objects{}, seen: map[string]position{}}
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	doc := 0
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.errs = append(d.errs, &Error{Source: source, Document: doc + 1, Err: fmt.Errorf("not valid YAML or JSON: %w", err)})
			break
		}
		if isEmpty(raw) {
			continue // an empty or comment-only document
		}
		doc++
		d.document(raw, position{document: doc})
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return d.out, nil
}

// position locates an object in the input.
type position struct {
	document, item int
}

func (p position) String() string {
	if p.item > 0 {
		return fmt.Sprintf("document %d item %d", p.document, p.item)
	}
	return fmt.Sprintf("document %d", p.document)
}

type decoder struct {
	source string
	out    *Objects
	errs   []error
	seen   map[string]position // "Kind namespace/name" -> where first seen
}

func isEmpty(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// header is what Decode reads of a document before knowing its type.
type header struct {
	kind, apiVersion, name string
	badKind, badAPIVersion bool // present but not a string
}

// peek reads kind, apiVersion and metadata.name of a document, leaving
// out any that is absent or not a string. fields is nil when the document
// is not an object.
func peek(raw json.RawMessage) (h header, fields map[string]json.RawMessage) {
	if json.Unmarshal(raw, &fields) != nil {
		return header{}, nil
	}
	h.badKind = fields["kind"] != nil && json.Unmarshal(fields["kind"], &h.kind) != nil
	h.badAPIVersion = fields["apiVersion"] != nil && json.Unmarshal(fields["apiVersion"], &h.apiVersion) != nil
	var meta struct {
		Name      any `json:"name"`
		Namespace any `json:"namespace"`
	}
	_ = json.Unmarshal(fields["metadata"], &meta)
	name, _ := meta.Name.(string)
	if ns, _ := meta.Namespace.(string); ns != "" && name != "" {
		name = ns + "/" + name
	}
	h.name = name
	return h, fields
}

// document decodes one document: an object or a list of them.
func (d *decoder) document(raw json.RawMessage, pos position) {
	h, fields := peek(raw)
	fail := func(field string, err error) {
		d.errs = append(d.errs, &Error{Source: d.source, Document: pos.document, Kind: h.kind, Name: h.name, Field: field, Err: err})
	}
	if fields == nil {
		fail("", errors.New("not an object"))
		return
	}
	gvk, err := groupVersionKind(h)
	if err != nil {
		var e *Error
		errors.As(err, &e)
		fail(e.Field, e.Err)
		return
	}
	itemKind, isList := listKinds[gvk]
	if !isList {
		d.object(raw, gvk, h, pos)
		return
	}

	var items []json.RawMessage
	if err := json.Unmarshal(fields["items"], &items); err != nil {
		fail("items", errors.New("must be a list"))
		return
	}
	for i, item := range items {
		d.item(item, itemKind, position{document: pos.document, item: i + 1})
	}
}

// item decodes one item of a list whose items are of kind want (any
// supported kind when want is empty).
func (d *decoder) item(raw json.RawMessage, want schema.GroupVersionKind, pos position) {
	h, fields := peek(raw)
	fail := func(field string, err error) {
		d.errs = append(d.errs, &Error{Source: d.source, Document: pos.document, Item: pos.item, Kind: h.kind, Name: h.name, Field: field, Err: err})
	}
	if fields == nil {
		fail("", errors.New("not an object"))
		return
	}
	// Items of a typed list may leave out their kind and apiVersion.
	if !want.Empty() {
		if h.kind == "" {
			h.kind = want.Kind
		}
		if h.apiVersion == "" {
			h.apiVersion = want.GroupVersion().String()
		}
	}
	gvk, err := groupVersionKind(h)
	if err != nil {
		var e *Error
		errors.As(err, &e)
		fail(e.Field, e.Err)
		return
	}
	if _, isList := listKinds[gvk]; isList {
		fail("kind", fmt.Errorf("%w: a list inside a list", ErrUnsupported))
		return
	}
	if !want.Empty() && gvk != want {
		fail("kind", fmt.Errorf("%s in a %sList", gvk.Kind, want.Kind))
		return
	}
	d.object(raw, gvk, h, pos)
}

// groupVersionKind checks a header's kind and apiVersion. Its error is an
// *Error with only Field and Err set.
func groupVersionKind(h header) (schema.GroupVersionKind, error) {
	if h.badKind {
		return schema.GroupVersionKind{}, &Error{Field: "kind", Err: errMustBeString}
	}
	if h.badAPIVersion {
		return schema.GroupVersionKind{}, &Error{Field: "apiVersion", Err: errMustBeString}
	}
	if h.kind == "" {
		return schema.GroupVersionKind{}, &Error{Field: "kind", Err: ErrRequired}
	}
	if h.apiVersion == "" {
		return schema.GroupVersionKind{}, &Error{Field: "apiVersion", Err: ErrRequired}
	}
	gv, err := schema.ParseGroupVersion(h.apiVersion)
	if err != nil {
		return schema.GroupVersionKind{}, &Error{Field: "apiVersion", Err: err}
	}
	gvk := gv.WithKind(h.kind)
	if _, ok := listKinds[gvk]; ok {
		return gvk, nil
	}
	for _, k := range supportedKinds {
		if gvk == k {
			return gvk, nil
		}
	}
	for _, k := range supportedKinds {
		if k.Kind == gvk.Kind {
			return gvk, &Error{Field: "apiVersion", Err: fmt.Errorf("%w: %q for %s: want %q", ErrUnsupported, h.apiVersion, k.Kind, k.GroupVersion())}
		}
	}
	return gvk, &Error{Field: "kind", Err: fmt.Errorf("%w: %s %q: want v1 Node, v1 Service or discovery.k8s.io/v1 EndpointSlice (or a List of them)", ErrUnsupported, h.apiVersion, h.kind)}
}

// object decodes, checks and keeps one object of a supported kind.
func (d *decoder) object(raw json.RawMessage, gvk schema.GroupVersionKind, h header, pos position) {
	fail := func(name, field string, err error) {
		d.errs = append(d.errs, &Error{Source: d.source, Document: pos.document, Item: pos.item, Kind: gvk.Kind, Name: name, Field: field, Err: err})
	}

	var into runtime.Object
	switch gvk {
	case gvNode:
		into = &v1.Node{}
	case gvService:
		into = &v1.Service{}
	case gvEndpointSlice:
		into = &discoveryv1.EndpointSlice{}
	}
	obj, _, err := serializer.Decode(raw, &gvk, into)
	if err != nil {
		field, problem := describeDecodeError(err)
		fail(h.name, field, problem)
		return
	}

	meta := metaOf(obj)
	if meta.Name == "" {
		fail("", "metadata.name", ErrRequired)
		return
	}
	if gvk != gvNode && meta.Namespace == "" {
		meta.Namespace = metav1.NamespaceDefault
	}
	// Messages name the object as the input does (h.name); the duplicate
	// check uses the defaulted namespace.
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok && es.Labels[discoveryv1.LabelServiceName] == "" {
		fail(h.name, "metadata.labels["+discoveryv1.LabelServiceName+"]", ErrRequired)
		return
	}
	id := gvk.Kind + " " + meta.Namespace + "/" + meta.Name
	if first, dup := d.seen[id]; dup {
		fail(h.name, "metadata.name", fmt.Errorf("duplicate: also in %v", first))
		return
	}
	d.seen[id] = pos

	switch o := obj.(type) {
	case *v1.Node:
		d.out.Nodes = append(d.out.Nodes, o)
	case *v1.Service:
		d.out.Services = append(d.out.Services, o)
	case *discoveryv1.EndpointSlice:
		d.out.EndpointSlices = append(d.out.EndpointSlices, o)
	}
}

func metaOf(obj runtime.Object) *metav1.ObjectMeta {
	switch o := obj.(type) {
	case *v1.Node:
		return &o.ObjectMeta
	case *v1.Service:
		return &o.ObjectMeta
	case *discoveryv1.EndpointSlice:
		return &o.ObjectMeta
	}
	panic(fmt.Sprintf("objects: unexpected type %T", obj))
}

var (
	// typeErrorRE matches the message of the JSON decoder's type errors:
	// "json: cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32".
	typeErrorRE = regexp.MustCompile(`cannot unmarshal (\S+) into Go struct field [^.\s]+\.(\S+) of type (\S+)`)
	// strictErrorRE matches one problem of a strict decoding error:
	// `unknown field "spec.portz"` or `duplicate field "spec.ports[0].port"`.
	strictErrorRE = regexp.MustCompile(`^(unknown|duplicate) field "(.*)"$`)
)

// describeDecodeError splits a decoding error into a field path and a
// short problem that wraps the original error. The JSON decoder reports
// field paths only in its messages, so they are parsed out; anything else
// is returned whole, without a field.
func describeDecodeError(err error) (field string, problem error) {
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		var fields, kinds, all []string
		for _, e := range strict.Errors() {
			m := strictErrorRE.FindStringSubmatch(e.Error())
			if m == nil {
				return "", err
			}
			kinds = append(kinds, m[1])
			fields = append(fields, m[2])
			all = append(all, e.Error())
		}
		if len(fields) == 0 {
			return "", err
		}
		msg := kinds[0] + " field"
		if len(fields) > 1 {
			msg += fmt.Sprintf(" (and %d more: %s)", len(fields)-1, strings.Join(all[1:], ", "))
		}
		return fields[0], &shortError{msg: msg, err: err}
	}
	if m := typeErrorRE.FindStringSubmatch(err.Error()); m != nil {
		return m[2], &shortError{msg: fmt.Sprintf("want %s, got %s", m[3], m[1]), err: err}
	}
	return "", err
}

// shortError shows a short message for an error whose own message repeats
// what Error already says.
type shortError struct {
	msg string
	err error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.err }
