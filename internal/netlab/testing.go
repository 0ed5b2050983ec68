//go:build linux

package netlab

import "testing"

// NewForTest returns a Lab that t.Cleanup closes (failing t if that
// fails), or skips t with the reason Probe gives when no lab can be built
// here.
func NewForTest(t testing.TB) *Lab {
	t.Helper()
	if err := Probe(); err != nil {
		t.Skipf("needs a network lab: %v", err)
	}
	lab, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Error(err)
		}
	})
	return lab
}
