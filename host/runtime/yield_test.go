package runtime

import (
	"testing"
	"time"
)

// TestNextGrant: a call whose yields come quickly (its checks charge more
// than the work done) is granted more per yield, up to maxGrant; one whose
// yields come slowly is granted less, down to yieldInterval.
func TestNextGrant(t *testing.T) {
	start := time.Duration(0)
	st := &callState{grant: yieldInterval, last: start}
	now := start
	for range 20 {
		now += yieldPeriod / 10
		st.nextGrant(now)
	}
	if st.grant != maxGrant {
		t.Fatalf("after 20 quick yields the grant is %d, want %d", st.grant, maxGrant)
	}
	now += yieldPeriod / 2 // in the band: no change
	if g := st.nextGrant(now); g != maxGrant {
		t.Fatalf("a yield %v after the last changed the grant to %d", yieldPeriod/2, g)
	}
	for range 20 {
		now += 3 * yieldPeriod
		st.nextGrant(now)
	}
	if st.grant != yieldInterval {
		t.Fatalf("after 20 slow yields the grant is %d, want %d", st.grant, yieldInterval)
	}
}
