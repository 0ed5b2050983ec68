// Command zone-drain is an endpoint-selection module that drains zones
// during maintenance: endpoints in the zones named by the Service
// annotation wasp.dev/drain-zones (comma-separated), or by the module's
// configuration for every Service, get no new connections, unless that
// would leave a traffic policy's set without any endpoint, in which case
// the set is kept whole (draining never blackholes a Service). Established
// connections are not touched: the dataplane only steers new ones.
//
// An annotation with an empty zone name ("zone-b,,zone-c") fails the
// port, which then keeps its last good decision (or upstream's): a typo
// never drains everything. A configuration it cannot use is rejected
// before the module runs at all.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/wasp-proxy/wasp/sdk/go/wasp"
)

// DefaultAnnotation names the zones to drain, comma-separated, unless the
// configuration names another annotation.
const DefaultAnnotation = "wasp.dev/drain-zones"

// Config is the module's configuration (modules[].config, or a
// ServiceProxyModule's spec.config).
type Config struct {
	// Annotation is the Service annotation that names the zones to drain.
	// Default wasp.dev/drain-zones.
	Annotation string `json:"annotation,omitempty"`
	// Zones are drained for every Service, besides the annotation's.
	Zones []string `json:"zones,omitempty"`
}

// config is the configuration in force: the host configures every
// instance before its first call.
var config = Config{Annotation: DefaultAnnotation}

func init() {
	wasp.Configure(configure)
	wasp.HandleEndpointSelection(selection)
}

// configure parses and checks the configuration; an error rejects it, and
// the host then does not load the module.
func configure(b []byte) error {
	c := Config{Annotation: DefaultAnnotation}
	if len(bytes.TrimSpace(b)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return fmt.Errorf("config: %w (want {\"annotation\": KEY, \"zones\": [ZONE, ...]})", err)
		}
	}
	if err := validAnnotationKey(c.Annotation); err != nil {
		return fmt.Errorf("annotation: %q: %w", c.Annotation, err)
	}
	for i, z := range c.Zones {
		if strings.TrimSpace(z) == "" {
			return fmt.Errorf("zones[%d]: empty zone name", i)
		}
		for j := range i {
			if c.Zones[j] == z {
				return fmt.Errorf("zones[%d]: %q is listed twice", i, z)
			}
		}
	}
	config = c
	return nil
}

// validAnnotationKey checks a Kubernetes annotation key: an optional DNS
// subdomain prefix and "/", then a name of at most 63 characters,
// alphanumeric at both ends, with "-", "_" and "." inside.
func validAnnotationKey(key string) error {
	prefix, name, ok := strings.Cut(key, "/")
	if !ok {
		prefix, name = "", key
	}
	if ok && (prefix == "" || len(prefix) > 253 || strings.Trim(prefix, "abcdefghijklmnopqrstuvwxyz0123456789-.") != "") {
		return errors.New("the prefix must be a lower-case DNS subdomain")
	}
	if name == "" || len(name) > 63 {
		return errors.New("the name must have 1 to 63 characters")
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := range len(name) {
		c := name[i]
		if !alnum(c) && ((c != '-' && c != '_' && c != '.') || i == 0 || i == len(name)-1) {
			return fmt.Errorf("the name may not have %q there: alphanumeric at both ends, '-', '_' or '.' inside", c)
		}
	}
	return nil
}

func selection(_ wasp.Node, sp wasp.ServicePort, out *wasp.SelectionResult) error {
	drained, err := zones(sp)
	if err != nil {
		return err
	}
	d := sp.Decision()
	for _, set := range []wasp.Indices{d.Cluster(), d.Local()} {
		kept := 0
		for k := range set.Len() {
			if !drained(sp.Endpoint(set.At(k)).Zone()) {
				kept++
			}
		}
		for k := range set.Len() {
			i := set.At(k)
			if kept == 0 || !drained(sp.Endpoint(i).Zone()) {
				out.Set(i, 1)
			}
		}
	}
	return nil
}

// zones returns whether a zone is drained for sp: by the configuration or
// by sp's annotation.
func zones(sp wasp.ServicePort) (func(string) bool, error) {
	names := config.Zones
	if v, ok := sp.Annotation(config.Annotation); ok {
		names = append(strings.Split(v, ","), names...)
		for i, n := range names {
			names[i] = strings.TrimSpace(n)
			if names[i] == "" {
				return nil, errors.New("annotation " + config.Annotation + ": empty zone name in " + v)
			}
		}
	}
	return func(z string) bool {
		for _, n := range names {
			if n == z {
				return true
			}
		}
		return false
	}, nil
}

func main() {}
