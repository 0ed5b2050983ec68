// Package printable makes text that wasp did not write fit to show a
// human: a module's stderr, error records and configuration rejections,
// its metadata, and whatever else a module or a registry hands back. Such
// text reaches terminals (wasp explain, wasp module inspect), Events,
// ServiceProxyModule status and logs, where an escape sequence could
// rewrite the screen, hide a line or forge one.
package printable

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with every rune a terminal would not just print
// escaped as Go escapes it in a quoted string: control characters such as
// ESC, CR, BEL or DEL (\x1b, \r, \a, \x7f), C1 controls (\u009b),
// bidirectional and other format characters (\u202e), and bytes that are
// not UTF-8 (\xff). Newlines and tabs stay: they are how multi-line
// messages read. Printable text, any script, comes back unchanged.
func String(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case keep(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// Error returns err with its message passed through String, for a log
// line or an Event; errors.Is and errors.As still see err. nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	return printableError{err}
}

type printableError struct{ err error }

func (e printableError) Error() string { return String(e.err.Error()) }
func (e printableError) Unwrap() error { return e.err }

func clean(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !keep(r) {
			return false
		}
		i += n
	}
	return true
}

func keep(r rune) bool {
	return r == '\n' || r == '\t' || unicode.IsPrint(r)
}
