package backendtest

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

// Harness is what a backend's tests give the suites: how to make the
// backend, how to see what it programmed, and what it does not support.
type Harness struct {
	// New returns a new backend of family programming the network
	// namespace at the path netns (such as /run/netns/x), or an
	// in-memory dataplane of its own when netns is "". Two backends of
	// one namespace and family program the same dataplane, as after a
	// restart. The suites call Close on every backend (Close must
	// accept a second call). Required.
	New func(t *testing.T, family backends.Family, netns string) backends.Backend
	// Dump renders the dataplane b programmed, canonically: two backends
	// that programmed one State dump alike whatever they programmed
	// before, and "" when nothing of b's is left. It may read the kernel
	// back. Required by RunTransitions and RunIdempotence; RunTraffic
	// uses it, when set, to see that Cleanup leaves nothing.
	Dump func(t *testing.T, b backends.Backend) string
	// Changes returns how many dataplane changes b's last Sync made.
	// Optional: RunIdempotence then requires 0 of a repeated Sync.
	Changes func(b backends.Backend) int
	// FullSyncs returns how often b rewrote its whole dataplane.
	// Optional: the suites then require that only a backend's first Sync
	// does (a restarted backend's first included).
	FullSyncs func(b backends.Backend) int
	// Kernel makes RunTransitions, RunIdempotence and RunLifecycle
	// program a throwaway network namespace (root only; they skip
	// otherwise) rather than an in-memory dataplane.
	Kernel bool
	// Probe reports why the backend cannot program the network
	// namespace at netns, for the kernel suites to skip with that reason.
	// Optional.
	Probe func(netns string) error
	// Families are the IP families RunTransitions, RunIdempotence and
	// RunLifecycle cover. Optional; default IPv4 and IPv6.
	Families []backends.Family
	// Unsupported maps a scenario to why the backend does not support
	// it; the scenario is skipped with that reason. A scenario is named
	// by its suite ("Traffic", "Transitions", "Idempotence",
	// "Lifecycle") and its
	// subtest path, as t.Run was given it, with spaces:
	// "Traffic/External" or "Traffic/External/eTP Local: pods
	// short-circuit". A name that is no scenario fails the suite.
	// Optional.
	Unsupported map[string]string
	// Checks add the backend's own checks to a scenario: Checks[name]
	// runs at the end of the scenario of that name (same spelling as
	// Unsupported), with what it programmed. Optional.
	Checks map[string]func(t *testing.T, e *Env)
}

// Env is what a scenario hands to the Harness's Checks.
type Env struct {
	// NetNS is the path of the namespace the backend programs ("" when
	// in memory).
	NetNS string
	// Backend is the backend the scenario ended with.
	Backend backends.Backend
	// State is the State it last synced.
	State *backends.State
	// Client is the address connections came from.
	Client netip.Addr
	// Answered is the endpoint that answered the scenario's connections,
	// when they all went to one (Restart, Affinity).
	Answered backends.Endpoint
}

// families returns the families to cover.
func (h *Harness) families() []backends.Family {
	if len(h.Families) > 0 {
		return h.Families
	}
	return []backends.Family{backends.IPv4, backends.IPv6}
}

// suite runs the scenarios of one suite under t, skipping the unsupported
// ones, and at the end fails on an Unsupported or Checks name that is no
// scenario of a part of the suite that ran in full.
type suite struct {
	h    *Harness
	name string

	mu   sync.Mutex
	seen map[string]bool // scenario paths reached, run or not
	ran  map[string]bool // paths whose subtests were all reached
}

// suiteNames are the suites, the first element of a scenario's name.
var suiteNames = []string{"Traffic", "Transitions", "Idempotence", "Lifecycle"}

func newSuite(t *testing.T, h *Harness, name string) *suite {
	s := &suite{h: h, name: name, seen: map[string]bool{}, ran: map[string]bool{}}
	t.Cleanup(func() {
		s.ran[name] = !t.Skipped()
		s.checkNames(t)
	})
	return s
}

// run runs scenario parent/name of the suite as a subtest of t; parent
// is the path below the suite, "" for a scenario at the top.
func (s *suite) run(t *testing.T, parent, name string, f func(t *testing.T)) {
	t.Helper()
	path := s.name + "/" + name
	if parent != "" {
		path = s.name + "/" + parent + "/" + name
	}
	s.mu.Lock()
	s.seen[path] = true
	s.mu.Unlock()
	t.Run(name, func(t *testing.T) {
		if why, ok := s.h.Unsupported[path]; ok {
			t.Skipf("%s: not supported by this backend: %s", path, why)
		}
		f(t)
		s.mu.Lock()
		s.ran[path] = true
		s.mu.Unlock()
	})
}

// check runs the Harness's check of scenario name of the suite, if any.
func (s *suite) check(t *testing.T, name string, e *Env) {
	t.Helper()
	if c := s.h.Checks[s.name+"/"+name]; c != nil {
		c(t, e)
	}
}

func (s *suite) checkNames(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.h.Unsupported {
		names = append(names, n)
	}
	for n := range s.h.Checks {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		root, _, _ := strings.Cut(n, "/")
		if !slices.Contains(suiteNames, root) {
			t.Errorf("backendtest: Harness names %q, which starts with no suite (%s)", n, strings.Join(suiteNames, ", "))
			continue
		}
		parent := root
		if i := strings.LastIndex(n, "/"); i >= 0 {
			parent = n[:i]
		}
		if s.ran[parent] && !s.seen[n] {
			t.Errorf("backendtest: Harness names %q, which is no scenario of %s", n, s.name)
		}
	}
}
