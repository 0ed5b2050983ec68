package backends

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

func TestProbeOutcomeOf(t *testing.T) {
	tests := []struct {
		err  error
		want ProbeOutcome
	}{
		{nil, ProbeSupported},
		{fmt.Errorf("conn.Receive: %w", syscall.EPERM), ProbeInconclusive},
		{syscall.ENOBUFS, ProbeInconclusive},
		{errors.New("open network namespace: gone"), ProbeInconclusive},
		{fmt.Errorf("flush: %w", syscall.EINVAL), ProbeNotSupported},
		{syscall.EOPNOTSUPP, ProbeNotSupported},
		{syscall.EPROTONOSUPPORT, ProbeNotSupported},
	}
	for _, tt := range tests {
		if got, _ := ProbeOutcomeOf(tt.err); got != tt.want {
			t.Errorf("ProbeOutcomeOf(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
