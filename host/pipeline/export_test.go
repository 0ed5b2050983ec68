package pipeline

import "time"

// SetClock makes p read the time, for its quarantine's retries, from now.
func SetClock(p *Pipeline, now func() time.Time) { p.now = now }
