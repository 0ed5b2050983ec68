//go:build !unix

package localfile_test

import "errors"

func mkfifo(string) error { return errors.New("no FIFOs") }
