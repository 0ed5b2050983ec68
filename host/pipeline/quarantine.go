package pipeline

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"time"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/abi"
)

// ErrQuarantined is wrapped by the error of a port whose stage was not
// called: the module failed for the port alone, with the same input and
// the same module, and its retry is not due (Options.QuarantineRetry). The
// error wraps that failure too.
var ErrQuarantined = errors.New("quarantined")

// ErrNotIsolated is wrapped by the error of a port that was in a call
// that failed as a whole, when the bisect budget ran out before the ports
// that cause the failure were told apart from it. The port is not blamed:
// it is evaluated alone the next time.
var ErrNotIsolated = errors.New("not isolated")

// maxBackoff is the largest factor of Options.QuarantineRetry.
const maxBackoff = 32

// suspect is a port in a stage's quarantine.
type suspect struct {
	// isolated: the module failed for the port alone, with err;
	// otherwise a failed call left it unresolved (ErrNotIsolated).
	isolated bool
	err      error
	// hash and gen identify the input and module of the failure.
	hash  uint64
	gen   uint64
	fails int // in a row, with the same input and module
	retry time.Time
}

// skip reports whether a port in quarantine is to get its last failure
// again, without a call: it was isolated, its input (hash) and module
// (gen) are the same, and its retry is not due.
func (s *suspect) skip(hash, gen uint64, now time.Time) bool {
	return s.isolated && s.hash == hash && s.gen == gen && now.Before(s.retry)
}

// skipped is the error of a port whose failure is applied again.
func (s *suspect) skipped() error {
	return fmt.Errorf("%w: not called again before %s unless its input or module changes; it failed alone: %w",
		ErrQuarantined, s.retry.UTC().Format(time.RFC3339), s.err)
}

// settle updates stage's quarantine after its calls: a port called
// successfully leaves it; a port the module failed for alone enters it
// (or stays, with a longer wait if its input and module are those of its
// last failure); a port not isolated enters it to be called alone. It
// logs, once per stage and Run, the ports that entered it.
func (p *Pipeline) settle(ctx context.Context, stage abi.Stage, node abi.Node, ports []Port, sps []abi.ServicePort, decisions []abi.Decision,
	live []int, errs []error, outcomes []outcome) {
	q := p.quarantine[stage]
	var now time.Time // read when first needed: rarely
	var isolated, unresolved []int
	for _, i := range live {
		key := ports[i].Key
		switch outcomes[i] {
		case outCalled:
			delete(q, key)
		case outIsolated:
			h := p.hasher.hash(stage, node, sps, decisions, i)
			s := q[key]
			switch {
			case s == nil || !s.isolated:
				isolated = append(isolated, i)
				fallthrough
			case s.hash != h || s.gen != p.gen[stage]:
				s = &suspect{isolated: true, hash: h, gen: p.gen[stage]}
				q[key] = s
			}
			s.err, s.fails = errs[i], s.fails+1
			if now.IsZero() {
				now = p.now()
			}
			s.retry = now.Add(p.opts.QuarantineRetry * time.Duration(min(1<<(s.fails-1), maxBackoff)))
		case outNotIsolated:
			if s := q[key]; s == nil || s.isolated {
				unresolved = append(unresolved, i)
			}
			q[key] = &suspect{}
		}
	}
	logger := klog.FromContext(ctx)
	if len(isolated) > 0 {
		i := isolated[0]
		logger.Info("Module failed for service ports alone; they are quarantined: called alone from now on, and not again with the same input and module for a while",
			"stage", stage.String(), "module", nameOf(p.opts.Modules[stage]), "ports", len(isolated), "servicePort", ports[i].Key,
			"retryAfter", p.opts.QuarantineRetry, "err", errs[i])
	}
	if len(unresolved) > 0 {
		logger.Info("Bisect budget spent before the service ports that fail the module were isolated; the others get the failure policy's fallback now and are evaluated alone next time",
			"stage", stage.String(), "module", nameOf(p.opts.Modules[stage]), "ports", len(unresolved), "servicePort", ports[unresolved[0]].Key,
			"bisectBudget", p.opts.BisectBudget)
	}
}

// inputHasher hashes the input a stage's module gets for one port.
type inputHasher struct {
	seed maphash.Seed
	enc  abi.Encoder
	buf  []byte
}

func newInputHasher() inputHasher { return inputHasher{seed: maphash.MakeSeed()} }

// hash returns the hash of port i's input to stage: the encoded batch of
// that port alone, with the node and the earlier stages' decision.
func (h *inputHasher) hash(stage abi.Stage, node abi.Node, sps []abi.ServicePort, decisions []abi.Decision, i int) uint64 {
	b := abi.Batch{Stage: stage, Node: node, Ports: sps[i : i+1], Decisions: decisions[i : i+1]}
	var err error
	h.buf, err = h.enc.Encode(h.buf[:0], &b)
	if err != nil {
		// The port cannot be encoded; its calls fail before the module
		// runs, whatever the hash.
		return 0
	}
	return maphash.Bytes(h.seed, h.buf)
}

// sameModule reports whether a and b are the same module (the same
// comparable value).
func sameModule(a, b Module) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	if ta != tb {
		return false
	}
	return ta == nil || (ta.Comparable() && a == b)
}
