package catalog

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestStatusEntryEscapes: a load error quoting a module's text reaches
// status.nodes with its terminal escapes escaped, cut to the limit on a
// character boundary.
func TestStatusEntryEscapes(t *testing.T) {
	e := statusEntry(NodeStatus{Phase: PhaseFailed, Message: "module \"m\" rejected its configuration: \x1b[2J\x1b]0;owned\a"}, "node-a")
	if got, want := e["message"], `module "m" rejected its configuration: \x1b[2J\x1b]0;owned\a`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if e["node"] != "node-a" || e["phase"] != PhaseFailed {
		t.Errorf("entry %v", e)
	}
	long := statusEntry(NodeStatus{Phase: PhaseFailed, Message: strings.Repeat("é\x1b", maxStatusMessage)}, "node-a")["message"].(string)
	if len(long) > maxStatusMessage || !utf8.ValidString(long) || strings.Contains(long, "\x1b") {
		t.Errorf("long message: %d bytes, valid UTF-8 %v, raw ESC %v", len(long), utf8.ValidString(long), strings.Contains(long, "\x1b"))
	}
}
