package xtables

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// contextLines is how many input lines before and after the failing one
// a RestoreError carries.
const contextLines = 3

// RestoreError is a restore that failed. The restore binaries name the
// input line they failed at in three ways, all parsed: a rule they cannot
// parse ("Error occurred at line: N", both variants), a rule the kernel
// refuses (nft: "line N: RULE_APPEND failed (...)") and a table the kernel
// refuses as a whole at its COMMIT (legacy: "line N failed", N being the
// COMMIT line).
type RestoreError struct {
	// Line is the 1-based input line the binary failed at; 0 when its
	// message names none (as when the xtables lock was not free in time).
	Line int
	// Text is input line Line, "" if there is none.
	Text string
	// Context is up to three input lines either side of Line, Line
	// included: Context[i] is input line max(1, Line-3)+i.
	Context []string
	// Table is the table whose section of the input holds Line ("" if
	// none does).
	Table string
	// Stderr is everything the binary wrote to its standard error.
	Stderr string

	command string // the binary's name
	code    int    // its exit status
}

func (e *RestoreError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: exit status %d: %s", e.command, e.code, condense(e.Stderr))
	}
	where := fmt.Sprintf("line %d", e.Line)
	if e.Table != "" {
		where += " (table " + e.Table + ")"
	}
	return fmt.Sprintf("%s failed at input %s %q: %s", e.command, where, e.Text, condense(e.Stderr))
}

// restoreLine finds the line number in a restore binary's message.
var restoreLine = regexp.MustCompile(`\bline:? ([0-9]+)\b`)

// newRestoreError describes the failure res of restore binary command fed
// with input.
func newRestoreError(command string, input []byte, res result) *RestoreError {
	e := &RestoreError{Stderr: string(res.stderr), command: command, code: res.code}
	m := restoreLine.FindStringSubmatch(e.Stderr)
	if m == nil {
		return e
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 {
		return e
	}
	e.Line = n
	lines := strings.Split(string(input), "\n")
	for i := 0; i < len(lines) && i < n; i++ {
		if t, ok := strings.CutPrefix(lines[i], "*"); ok {
			e.Table = strings.TrimSpace(t)
		}
	}
	if n <= len(lines) {
		e.Text = lines[n-1]
	} else {
		e.Table = ""
	}
	first, last := max(1, n-contextLines), min(len(lines), n+contextLines)
	for i := first; i <= last; i++ {
		e.Context = append(e.Context, lines[i-1])
	}
	return e
}
