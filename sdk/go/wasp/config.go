package wasp

import "bytes"

// ConfigureFunc receives the module's own configuration: the JSON of the
// module's `config` in wasp's configuration file or its
// ServiceProxyModule, as given; empty when there is none. It returns an
// error to reject the configuration: the host then refuses to load the
// module and reports the error's text. config is the module's own copy,
// which it may keep.
type ConfigureFunc func(config []byte) error

var configure ConfigureFunc

// Configure registers the module's configuration handler. The host calls
// it on every new instance, after the init functions and before the first
// stage call, always with the same bytes: a handler should parse and check
// everything there, keep the result in package variables, and reject what
// it cannot use, so that a bad configuration fails the load instead of
// every call. Without a handler, a module accepts only no configuration
// (empty, null or {}) and rejects any other.
func Configure(fn ConfigureFunc) { configure = fn }

// RunConfigure hands config to the registered handler and returns its
// rejection message, "" when the configuration is accepted. A panic in
// the handler is a rejection too. The exported Wasm function calls
// RunConfigure; package wasptest calls it natively.
func RunConfigure(config []byte) (msg string) {
	config = bytes.Clone(config)
	if configure == nil {
		if s := bytes.TrimSpace(config); len(s) == 0 || string(s) == "null" || string(bytes.Join(bytes.Fields(s), nil)) == "{}" {
			return ""
		}
		return "this module takes no configuration (it registers no wasp.Configure handler)"
	}
	defer func() {
		if r := recover(); r != nil {
			msg = panicMessage(r)
		}
	}()
	if err := configure(config); err != nil {
		msg = err.Error()
		if msg == "" {
			msg = "configuration rejected"
		}
	}
	return msg
}
