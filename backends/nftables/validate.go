package nftables

import (
	"fmt"

	"github.com/wasp-proxy/wasp/backends"
)

// validate checks that s can be programmed in a table of family: s is of
// that family and keeps the backends contract (backends.Validate). The
// error wraps ErrInvalidState and names every problem.
func validate(family backends.Family, s *backends.State) error {
	if s != nil && s.Family != family {
		return fmt.Errorf("nftables: %w: family %s, want %s", ErrInvalidState, s.Family.String(), family.String())
	}
	if err := backends.Validate(s); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}

// validator validates each State against the last one that passed,
// checking only the service ports that are not identical to one of it (a
// State is never modified once given to a Backend): a change costs the
// same whatever the number of service ports, where backends.Validate
// reads every endpoint. What it accepts and refuses, and how it names a
// problem, is validate's.
type validator struct {
	family backends.Family
	last   *backends.State // nil: none yet
}

func (v *validator) validate(s *backends.State) error {
	if s == nil || v.last == nil || s.Family != v.family {
		if err := validate(v.family, s); err != nil {
			return err
		}
		v.last = s
		return nil
	}
	// The changed service ports, with s's state-wide fields, in order.
	changed := *s
	changed.Services = nil
	prev := v.last.Services
	sorted := true
	j, prevSame := 0, false
	for i := range s.Services {
		svc := &s.Services[i]
		for j < len(prev) && prev[j].Key != svc.Key && prev[j].Key < svc.Key {
			j++
		}
		same := j < len(prev) && identical(&prev[j], svc)
		if same {
			j++
		} else {
			changed.Services = append(changed.Services, *svc)
		}
		// Two service ports identical to two of the last State, in
		// its order, are sorted; any other pair is compared.
		if i > 0 && !(same && prevSame) && s.Services[i-1].Key >= svc.Key {
			sorted = false
		}
		prevSame = same
	}
	if !sorted || backends.Validate(&changed) != nil {
		// Validate names the culprit by its place in s.
		if err := validate(v.family, s); err != nil {
			return err
		}
	}
	v.last = s
	return nil
}
