package xtables

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrLineTooLong is the error of a LineWriter's Write that would make a
// line longer than its bound.
var ErrLineTooLong = errors.New("line too long")

// LineWriter is an io.Writer that passes each line written to it, without
// its newline, to a function, however the writes cut the lines: it reads
// a save binary's output as it comes, and finds the lines of a restore's
// Input that a RestoreError quotes.
type LineWriter struct {
	f       func(line []byte)
	max     int
	partial []byte
}

// NewLineWriter returns a LineWriter that passes each line to f, which
// must not keep the slice, and fails a line longer than max bytes (0: no
// bound).
func NewLineWriter(max int, f func(line []byte)) *LineWriter {
	return &LineWriter{f: f, max: max}
}

func (w *LineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		end := i
		if i < 0 {
			end = len(p)
		}
		if w.max > 0 && len(w.partial)+end > w.max {
			return n - len(p), fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, w.max)
		}
		if i < 0 {
			w.partial = append(w.partial, p...)
			break
		}
		line := p[:i]
		if len(w.partial) > 0 {
			w.partial = append(w.partial, line...)
			line = w.partial
		}
		w.f(line)
		w.partial = w.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

// Close passes the last line, the text after the last newline, even when
// it is empty.
func (w *LineWriter) Close() error {
	w.f(w.partial)
	w.partial = w.partial[:0]
	return nil
}
