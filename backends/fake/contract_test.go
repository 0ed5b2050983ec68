package fake_test

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/fake"
)

// carried lists every field of backends.State and of the structs it holds
// (by type: "Service.Port" is the field of every service port): whether a
// nil list differs from an empty one, and why the field has no line of
// its own in DumpState ("" when it has one). A field missing here fails
// TestEveryFieldCarried: carry it through Clone, Equal and DumpState,
// then add it.
var carried = map[string]struct {
	nilMatters bool
	notDumped  string
}{
	"State.Family":            {},
	"State.NodePortAddresses": {},
	"State.NodeIPs":           {},
	"State.ServiceCIDRs":      {},
	"State.ClusterCIDRs":      {},
	"State.MasqueradeAll":     {},
	"State.Services":          {},

	"Service.Key":                      {},
	"Service.Namespace":                {notDumped: "part of the key"},
	"Service.Name":                     {notDumped: "part of the key"},
	"Service.PortName":                 {notDumped: "part of the key"},
	"Service.Protocol":                 {},
	"Service.ClusterIP":                {},
	"Service.Port":                     {},
	"Service.NodePort":                 {},
	"Service.ExternalIPs":              {},
	"Service.LoadBalancerVIPs":         {},
	"Service.LoadBalancerSourceRanges": {},
	"Service.AffinityTimeout":          {},
	"Service.HealthCheckNodePort":      {},
	"Service.InternalPolicyLocal":      {},
	"Service.ExternalPolicyLocal":      {},
	"Service.HasAnyEndpoints":          {},
	"Service.Cluster":                  {nilMatters: true},
	"Service.Local":                    {nilMatters: true},
	"Service.Serving":                  {},

	"Endpoint.Addr":   {},
	"Endpoint.Port":   {},
	"Endpoint.Weight": {},
}

// fullState sets every field, every list non-empty, so that each can be
// changed on its own.
func fullState() *backends.State {
	s := goldenState()
	s.Services = []backends.Service{svc("full", "10.96.0.40", func(s *backends.Service) {
		s.NodePort, s.HealthCheckNodePort, s.AffinityTimeout = 30040, 32040, 60
		s.ExternalIPs = []netip.Addr{ip("192.0.2.40")}
		s.LoadBalancerVIPs = []netip.Addr{ip("203.0.113.40")}
		s.LoadBalancerSourceRanges = []netip.Prefix{pfx("198.51.100.0/24")}
		s.HasAnyEndpoints = true
		s.Cluster = []backends.Endpoint{ep("10.244.1.40", 2), ep("10.244.2.40", 1)}
		s.Local = []backends.Endpoint{ep("10.244.1.40", 1)}
		s.Serving = []netip.Addr{ip("10.244.1.40"), ip("10.244.2.40")}
	})}
	return s
}

// field is a field of the State or of a struct it holds, found by
// following steps from the State: a field index, or -1 for element 0 of
// a list.
type field struct {
	name  string
	steps []int
	typ   reflect.Type
}

var backendsPkg = reflect.TypeFor[backends.State]().PkgPath()

// fieldsOf returns the fields of struct type t, named after typeName, and
// those of the structs of package backends they hold.
func fieldsOf(t reflect.Type, typeName string, steps []int) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		p := append(append([]int(nil), steps...), i)
		ft := f.Type
		if ft.Kind() == reflect.Struct && ft.PkgPath() == backendsPkg {
			out = append(out, fieldsOf(ft, typeName+"."+f.Name, p)...)
			continue
		}
		out = append(out, field{name: typeName + "." + f.Name, steps: p, typ: ft})
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && ft.Elem().PkgPath() == backendsPkg {
			out = append(out, fieldsOf(ft.Elem(), ft.Elem().Name(), append(p, -1))...)
		}
	}
	return out
}

// at returns the value of f in s.
func at(t *testing.T, s *backends.State, f field) reflect.Value {
	t.Helper()
	v := reflect.ValueOf(s).Elem()
	for _, st := range f.steps {
		if st >= 0 {
			v = v.Field(st)
			continue
		}
		if v.Len() == 0 {
			t.Fatalf("%s: fullState has an empty list on the way; give it an element", f.name)
		}
		v = v.Index(0)
	}
	return v
}

// change changes the value v in place: the first element of a list of
// values, a list of structs to an empty one.
func change(t *testing.T, name string, v reflect.Value) {
	t.Helper()
	switch x := v.Interface().(type) {
	case netip.Addr:
		v.Set(reflect.ValueOf(x.Next()))
		return
	case netip.Prefix:
		v.Set(reflect.ValueOf(netip.PrefixFrom(x.Addr(), x.Bits()-1).Masked()))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Slice:
		if v.Len() == 0 {
			t.Fatalf("%s: empty in fullState; give it an element", name)
		}
		if v.Type().Elem().Kind() == reflect.Struct && v.Type().Elem().PkgPath() == backendsPkg {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		change(t, name+"[0]", v.Index(0))
	default:
		t.Fatalf("%s: no way to change a %s; teach change", name, v.Type())
	}
}

// TestEveryFieldCarried changes each field of a State on its own and
// checks that Clone copies it without sharing memory, Equal tells the
// change, and DumpState shows it: a field added to the contract and
// forgotten by one of them fails here.
func TestEveryFieldCarried(t *testing.T) {
	base := fullState()
	if c := base.Clone(); !reflect.DeepEqual(c, base) || !c.Equal(base) {
		t.Fatalf("Clone of the full State differs:\n%s\nwant:\n%s", fake.DumpState(c), fake.DumpState(base))
	}
	seen := map[string]bool{}
	for _, f := range fieldsOf(reflect.TypeFor[backends.State](), "State", nil) {
		seen[f.name] = true
		how, ok := carried[f.name]
		if !ok {
			t.Errorf("%s is not in the carried table: carry it through Clone, Equal and DumpState, then add it", f.name)
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			c := base.Clone()
			change(t, f.name, at(t, c, f))
			if !reflect.DeepEqual(base, fullState()) {
				t.Errorf("changing the clone changed the original: Clone shares %s", f.name)
			}
			if cc := c.Clone(); !reflect.DeepEqual(cc, c) {
				t.Errorf("Clone does not copy %s", f.name)
			}
			if c.Equal(base) || base.Equal(c) {
				t.Errorf("Equal misses a change of %s", f.name)
			}
			if !c.Equal(c.Clone()) {
				t.Errorf("a State is not Equal to its clone after a change of %s", f.name)
			}
			switch changed := fake.DumpState(c) != fake.DumpState(base); {
			case how.notDumped == "" && !changed:
				t.Errorf("DumpState does not show a change of %s", f.name)
			case how.notDumped != "" && changed:
				t.Errorf("DumpState shows %s, which the table says is not dumped (%s)", f.name, how.notDumped)
			}
			if f.typ.Kind() != reflect.Slice {
				return
			}
			empty, null := base.Clone(), base.Clone()
			at(t, empty, f).Set(reflect.MakeSlice(f.typ, 0, 0))
			at(t, null, f).Set(reflect.Zero(f.typ))
			for _, s := range []*backends.State{empty, null} {
				if cs := s.Clone(); !reflect.DeepEqual(cs, s) {
					t.Errorf("Clone does not keep a nil or empty %s as it is", f.name)
				}
			}
			if how.nilMatters != !empty.Equal(null) {
				t.Errorf("Equal of a nil and an empty %s is %v; want %v", f.name, empty.Equal(null), !how.nilMatters)
			}
			if how.nilMatters && fake.DumpState(empty) == fake.DumpState(null) {
				t.Errorf("DumpState shows a nil and an empty %s alike", f.name)
			}
		})
	}
	for name := range carried {
		if !seen[name] {
			t.Errorf("the carried table names %s, which is no field any more", name)
		}
	}
}

// TestSyncKeepsEveryField: what the Fake programs, and hands back, is
// the State it was given, every field included.
func TestSyncKeepsEveryField(t *testing.T) {
	f := fake.New()
	s := fullState()
	if _, err := f.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if got := f.State(backends.IPv4); !reflect.DeepEqual(got, s) {
		t.Errorf("programmed:\n%s\nwant:\n%s", fake.DumpState(got), fake.DumpState(s))
	}
}
