package runtime

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wasp-proxy/wasp/abi"
)

// Reason classifies a failed module call, for metrics and logs.
type Reason string

const (
	// ReasonTrap: the guest trapped (unreachable, out-of-bounds access, a
	// Go panic that escaped the SDK, ...).
	ReasonTrap Reason = "trap"
	// ReasonTimeout: the call ran past its deadline and was interrupted.
	ReasonTimeout Reason = "timeout"
	// ReasonMemory: the guest ran out of its memory cap.
	ReasonMemory Reason = "memory"
	// ReasonExit: the guest exited (proc_exit) during the call.
	ReasonExit Reason = "exit"
	// ReasonNoOutput: the stage function returned no output.
	ReasonNoOutput Reason = "no-output"
	// ReasonInvalidOutput: the output was malformed or broke the ABI's
	// rules.
	ReasonInvalidOutput Reason = "invalid-output"
	// ReasonInstantiate: a fresh instance could not be created.
	ReasonInstantiate Reason = "instantiate"
	// ReasonModuleError: the module reported an error for a service port
	// (an error record: it declined, or its handler failed or panicked).
	ReasonModuleError Reason = "module-error"
)

// Reasons lists every Reason, for pre-registering metric series.
var Reasons = []Reason{ReasonTrap, ReasonTimeout, ReasonMemory, ReasonExit, ReasonNoOutput, ReasonInvalidOutput, ReasonInstantiate, ReasonModuleError}

// CallError is a failed call into a module.
type CallError struct {
	Module string
	// Stage is the stage called, or 0 for wasp_configure.
	Stage  abi.Stage
	Reason Reason
	// Stderr is the first line the guest wrote to stderr, if any (a Go
	// guest's "fatal error: ..." or panic message, for instance).
	Stderr string
	Err    error
}

func (e *CallError) Error() string {
	if e.Stage == 0 {
		return fmt.Sprintf("module %q %s: %s", e.Module, abi.ConfigureExport, e.detail())
	}
	return fmt.Sprintf("module %q stage %s: %s", e.Module, e.Stage, e.detail())
}

// detail is the error without its module and stage: the reason, the first
// line of the cause, and stderr.
func (e *CallError) detail() string {
	msg := string(e.Reason)
	if e.Err != nil {
		// wazero appends a multi-line Wasm stack trace; the first line says
		// what happened.
		first, _, _ := strings.Cut(e.Err.Error(), "\n")
		msg += ": " + first
	}
	if e.Stderr != "" {
		msg += " (stderr: " + e.Stderr + ")"
	}
	return msg
}

func (e *CallError) Unwrap() error { return e.Err }

// ReasonOf returns the Reason of a *CallError in err's chain, or "" if
// there is none.
func ReasonOf(err error) Reason {
	if err == nil {
		return "" // without the allocation of errors.As's target
	}
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return ""
}

// ErrInvalidModule is wrapped by every Load error caused by the module
// itself (as opposed to the runtime): bad binary, wrong ABI, missing
// metadata or exports, forbidden imports, failing initialisation.
var ErrInvalidModule = errors.New("invalid module")

// ErrConfigRejected is wrapped by every Load error caused by the module's
// configuration (WithConfig): the module rejected it through
// wasp_configure, it is too large, or the module takes none (it does not
// export wasp_configure).
var ErrConfigRejected = errors.New("configuration rejected")

// errPoolFull is wrapped by the error of an instance that could not be
// created because the module's other instances hold its memory pool: a
// call that needed it fails with ReasonMemory.
var errPoolFull = errors.New("module memory pool full")

// errRecovered is wrapped by the error of a call or an instantiation
// during which wasp recovered from a panic, so that no module can take the
// process down through a fault of the runtime's.
var errRecovered = errors.New("recovered from a panic")

// classified is err, which errors.Is also finds to be class.
type classified struct{ err, class error }

func (c classified) Error() string   { return c.err.Error() }
func (c classified) Unwrap() []error { return []error{c.err, c.class} }
