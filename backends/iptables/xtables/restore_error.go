package xtables

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
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
// with input. It writes input again to find the line the binary names,
// and keeps of it only that line, the lines around it and the table
// it is in.
func newRestoreError(command string, input Input, res result) *RestoreError {
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
	p := linePicker{want: n}
	w := NewLineWriter(0, p.line)
	_ = input(w) // an input that fails now has written what the binary read
	w.Close()
	if n <= p.lines {
		e.Text, e.Table = p.text, p.table
	}
	e.Context = p.context
	return e
}

// linePicker keeps, of the lines of an input (numbered from 1, the text
// after the last newline being the last line even when empty), line
// want, the lines up to contextLines either side of it, and the table of
// the last "*table" line up to it.
type linePicker struct {
	want    int
	lines   int // lines read so far
	text    string
	table   string
	context []string
}

func (p *linePicker) line(line []byte) {
	p.lines++
	if p.lines <= p.want {
		if t, ok := bytes.CutPrefix(line, []byte("*")); ok {
			p.table = string(bytes.TrimSpace(t))
		}
	}
	if p.lines == p.want {
		p.text = string(line)
	}
	if p.lines >= p.want-contextLines && p.lines <= p.want+contextLines {
		p.context = append(p.context, string(line))
	}
}
