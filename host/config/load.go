package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/wasp-proxy/wasp/host/config/internal/kubeproxy"
	"github.com/wasp-proxy/wasp/host/config/v1alpha1"
)

// Warnings are problems that do not stop wasp, each "field: what".
type Warnings []string

// Load reads a configuration file, YAML or JSON: wasp's
// wasp.dev/v1alpha1 WaspConfiguration, or kube-proxy's
// kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration converted to it.
// It returns the configuration defaulted and valid, or the aggregate of a
// field.ErrorList with every problem found and a nil configuration.
//
// Decoding is strict: an unknown or duplicate field is an error, unless
// the file sets configHardFail: false. A KubeProxyConfiguration that does
// not decode strictly is decoded leniently instead, with a warning per
// problem, as kube-proxy does.
func Load(data []byte) (*v1alpha1.WaspConfiguration, Warnings, error) {
	c, w, errs := Decode(data)
	if c != nil {
		Default(c)
		vw, verrs := Validate(c)
		w, errs = append(w, vw...), append(errs, verrs...)
	}
	if len(errs) > 0 {
		return nil, w, errs.ToAggregate()
	}
	return c, w, nil
}

// Default fills in every field of c that is not given.
func Default(c *v1alpha1.WaspConfiguration) { v1alpha1.SetDefaults(c) }

// Decode decodes a configuration file as Load does, without defaulting
// (but for a KubeProxyConfiguration, which is converted with kube-proxy's
// defaults) or validation. With errors it returns the configuration too
// when the only errors are unknown or duplicate fields, so that its values
// can be validated as well: every problem is reported at once.
func Decode(data []byte) (*v1alpha1.WaspConfiguration, Warnings, field.ErrorList) {
	j, err := yaml.YAMLToJSONStrict(data)
	var strictErrs field.ErrorList
	if err != nil {
		// Duplicate keys, or no YAML at all.
		lenient, lerr := yaml.YAMLToJSON(data)
		if lerr != nil {
			return nil, nil, field.ErrorList{documentError(lerr.Error())}
		}
		msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
		j, strictErrs = lenient, field.ErrorList{documentError(strings.Join(strings.Fields(msg), " "))}
	}
	if t := bytes.TrimSpace(j); len(t) == 0 || t[0] != '{' {
		return nil, nil, field.ErrorList{documentError("want a YAML or JSON object")}
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return nil, nil, field.ErrorList{documentError(err.Error())}
	}

	switch gv := tm.GroupVersionKind(); {
	case gv.GroupVersion() == v1alpha1.SchemeGroupVersion && gv.Kind == v1alpha1.Kind:
		c := &v1alpha1.WaspConfiguration{}
		se, errs := decodeStrict(j, c)
		if len(errs) > 0 {
			return nil, nil, errs
		}
		strictErrs = append(strictErrs, se...)
		if len(strictErrs) == 0 {
			return c, nil, nil
		}
		if c.ConfigHardFail != nil && !*c.ConfigHardFail {
			return c, warnings("configHardFail is false, so this is ignored", strictErrs), nil
		}
		return c, nil, strictErrs

	case gv.GroupVersion() == kubeproxy.GroupVersion && gv.Kind == kubeproxy.Kind:
		k := &kubeproxy.Configuration{}
		se, errs := decodeStrict(j, k)
		if len(errs) > 0 {
			return nil, nil, errs
		}
		strictErrs = append(strictErrs, se...)
		w := warnings("decoded leniently, as kube-proxy does", strictErrs)
		c, cw := fromKubeProxy(k)
		return c, append(w, cw...), nil

	case tm.APIVersion == "" || tm.Kind == "":
		return nil, nil, field.ErrorList{field.Required(field.NewPath("apiVersion"),
			fmt.Sprintf("and kind: want %s %s or %s %s", v1alpha1.SchemeGroupVersion, v1alpha1.Kind, kubeproxy.GroupVersion, kubeproxy.Kind))}
	default:
		return nil, nil, field.ErrorList{field.NotSupported(field.NewPath("kind"), tm.APIVersion+" "+tm.Kind,
			[]string{v1alpha1.SchemeGroupVersion.String() + " " + v1alpha1.Kind, kubeproxy.GroupVersion.String() + " " + kubeproxy.Kind})}
	}
}

// Marshal writes c as YAML, as wasp's latest version.
func Marshal(c *v1alpha1.WaspConfiguration) ([]byte, error) {
	out := *c
	out.APIVersion, out.Kind = v1alpha1.SchemeGroupVersion.String(), v1alpha1.Kind
	return yaml.Marshal(&out)
}

// documentError is a problem of the whole document.
func documentError(detail string) *field.Error {
	return &field.Error{Type: field.ErrorTypeInvalid, Field: "<document>", BadValue: field.OmitValueType{}, Detail: detail}
}

func warnings(why string, errs field.ErrorList) Warnings {
	var w Warnings
	for _, e := range errs {
		w = append(w, e.Error()+" ("+why+")")
	}
	return w
}

// decodeStrict decodes the JSON object j into v. Unknown and duplicate
// fields are strict errors: v is decoded anyway. A value of the wrong type
// is an error, found with its field path.
func decodeStrict(j []byte, v any) (strict, errs field.ErrorList) {
	se, err := sjson.UnmarshalStrict(j, v)
	for _, e := range se {
		strict = append(strict, strictError(e))
	}
	if err != nil {
		errs = locate(j, v, nil, func(b []byte) []byte { return b })
		if len(errs) == 0 { // not found: report it as it is
			errs = field.ErrorList{documentError(err.Error())}
		}
	}
	return strict, errs
}

// strictError turns an error of sigs.k8s.io/json's strict decoding into a
// field error.
func strictError(err error) *field.Error {
	var path string
	if fe, ok := err.(sjson.FieldError); ok {
		path = fe.FieldPath()
	}
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, "unknown field"):
		return field.Forbidden(field.NewPath(path), "unknown field")
	case strings.HasPrefix(msg, "duplicate field"):
		return field.Forbidden(field.NewPath(path), "duplicate field")
	default:
		return documentError(msg)
	}
}

// locate finds the values that do not decode into the type of v, each with
// its field path: it decodes each member of the object (or element of the
// array) raw at path alone, wrapped back into its parents by wrap, and
// descends into the members that fail.
func locate(raw []byte, v any, path *field.Path, wrap func([]byte) []byte) field.ErrorList {
	try := func(b []byte) error {
		fresh := newOf(v)
		_, err := sjson.UnmarshalStrict(wrap(b), fresh)
		return err
	}
	var errs field.ErrorList
	var obj map[string]json.RawMessage
	var arr []json.RawMessage
	switch {
	case json.Unmarshal(raw, &obj) == nil && obj != nil:
		if path != nil && try([]byte("{}")) != nil {
			break // no object belongs here
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			member := func(b []byte) []byte { return wrap(objectOf(k, b)) }
			if try(objectOf(k, obj[k])) != nil {
				errs = append(errs, locate(obj[k], v, path.Child(k), member)...)
			}
		}
	case json.Unmarshal(raw, &arr) == nil && arr != nil:
		if path != nil && try([]byte("[]")) != nil {
			break // no list belongs here
		}
		for i, e := range arr {
			elem := func(b []byte) []byte { return wrap(append(append([]byte("["), b...), ']')) }
			if try(append(append([]byte("["), e...), ']')) != nil {
				errs = append(errs, locate(e, v, path.Index(i), elem)...)
			}
		}
	}
	if len(errs) > 0 || path == nil {
		return errs
	}
	// A leaf, or a value that fails as a whole.
	err := try(raw)
	if err == nil {
		return nil
	}
	var bad any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	_ = d.Decode(&bad)
	return field.ErrorList{field.Invalid(path, bad, typeDetail(err))}
}

// typeDetail shortens a decoding error for a field error.
func typeDetail(err error) string {
	msg := err.Error()
	if _, t, ok := strings.Cut(msg, " of type "); ok {
		return "must be of type " + t
	}
	return strings.TrimPrefix(msg, "json: ")
}

func objectOf(k string, v []byte) []byte {
	key, _ := json.Marshal(k)
	return append(append(append(append([]byte("{"), key...), ':'), v...), '}')
}

func newOf(v any) any { return reflect.New(reflect.TypeOf(v).Elem()).Interface() }
