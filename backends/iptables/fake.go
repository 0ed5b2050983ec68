package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/backends/iptables/xtables"
)

// Fake is an in-memory iptables of one IP family: its filter and nat
// tables, their chains and rules, and the hairpin ipsets with their
// entries. A Backend made with NewWithFake programs it instead of the
// kernel, so the sync loop and golden tests run without root.
//
// It applies iptables-restore input with --noflush semantics: "*table"
// starts a table's section, which takes effect whole at its "COMMIT" or
// not at all (earlier sections stay committed, as in the kernel); a
// ":CHAIN - [0:0]" line creates a chain or flushes an existing one (a
// built-in chain's line sets its policy); "-A" appends, "-I" inserts,
// "-D" deletes, "-F" flushes, "-N" creates and "-X" deletes a chain. It
// refuses what the kernel refuses: a rule of a missing chain, a jump to a
// chain that does not exist or is built-in, a match of a missing set
// (and flags other than the hairpin rule's), a target of another table
// (DNAT and MASQUERADE are nat's, REJECT filter's), a match iptables
// lacks ("-m"), a chain name over MaxChainName, and "-X" of a built-in
// chain, of a missing one or of one a rule still jumps to. The error is a
// *LineError. Rules are kept as their arguments; Save and Dump show the
// tables in iptables-save's layout, each rule as it was given (the real
// iptables-save reorders a rule's options and adds their defaults), and
// SaveSets the sets in ipset-save's. A set a rule matches is not
// destroyed, as in the kernel.
//
// It is safe for concurrent use.
type Fake struct {
	mu          sync.Mutex
	tables      map[string]*fakeTable
	sets        map[string]*fakeSet
	failNext    error
	randomFully bool
	localnet    bool            // routeLocalnet was called
	missing     map[string]bool // matches refused as if the kernel lacked them
	restores    []string        // inputs applied, for tests
}

var _ kernel = (*Fake)(nil)

type fakeTable struct {
	chains map[string]*fakeChain
	owned  map[string]bool // chains of a working copy it may change in place
}

// fakeSet is a hash:ip,port,ip ipset.
type fakeSet struct {
	family  backends.Family
	entries map[HairpinEntry]bool
}

type fakeChain struct {
	builtin bool
	policy  string
	rules   [][]string
}

// builtinChains are the chains of each table the Fake knows, in
// iptables-save's order.
var builtinChains = map[string][]string{
	TableFilter: {chainInput, chainForward, chainOutput},
	TableNAT:    {chainPrerouting, chainInput, chainOutput, chainPostrouting},
}

// tableTargets are the targets each table allows besides chains.
var tableTargets = map[string][]string{
	TableFilter: {targetAccept, targetDrop, targetReturn, targetReject, targetMark, "LOG"},
	TableNAT:    {targetAccept, targetDrop, targetReturn, targetDNAT, "SNAT", targetMasquerade, targetMark, "REDIRECT", "LOG"},
}

// knownMatches are the "-m" matches the Fake accepts.
var knownMatches = []string{"comment", "tcp", "udp", "sctp", "conntrack", "mark", "addrtype", "statistic", "recent", "nfacct", "set"}

// NewFake returns an empty Fake (built-in chains only) whose MASQUERADE
// takes --random-fully.
func NewFake() *Fake {
	f := &Fake{tables: map[string]*fakeTable{}, sets: map[string]*fakeSet{}, randomFully: true}
	for table, chains := range builtinChains {
		t := &fakeTable{chains: map[string]*fakeChain{}}
		for _, c := range chains {
			t.chains[c] = &fakeChain{builtin: true, policy: targetAccept}
		}
		f.tables[table] = t
	}
	return f
}

// FailNext makes the next restore fail with err, changing nothing.
func (f *Fake) FailNext(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

// SetHasRandomFully says whether MASQUERADE takes --random-fully (as
// iptables before 1.6.2 does not). A Backend asks when it is made.
func (f *Fake) SetHasRandomFully(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.randomFully = v
}

// Save returns table in iptables-save format: built-in chains, then the
// others by name; then the rules, chain by chain in that order.
func (f *Fake) Save(table string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tables[table]
	if t == nil {
		return ""
	}
	return t.save(table)
}

// Dump returns Save of the filter and the nat table, then SaveSets.
func (f *Fake) Dump() string { return f.Save(TableFilter) + f.Save(TableNAT) + f.SaveSets() }

// SaveSets returns the ipsets in ipset-save's format, by name, each
// set's entries sorted: "create NAME hash:ip,port,ip family inet", then
// "add NAME 10.244.1.10,tcp:8080,10.244.1.10" lines.
func (f *Fake) SaveSets() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := slices.Sorted(maps.Keys(f.sets))
	var b strings.Builder
	for _, n := range names {
		set := f.sets[n]
		fam := "inet"
		if set.family == backends.IPv6 {
			fam = "inet6"
		}
		b.WriteString("create " + n + " " + setType + " family " + fam + "\n")
		entries := make([]string, 0, len(set.entries))
		for e := range set.entries {
			entries = append(entries, e.String())
		}
		slices.Sort(entries)
		for _, e := range entries {
			b.WriteString("add " + n + " " + e + "\n")
		}
	}
	return b.String()
}

func (t *fakeTable) order(table string) []string {
	names := slices.Clone(builtinChains[table])
	var user []string
	for n, c := range t.chains {
		if !c.builtin {
			user = append(user, n)
		}
	}
	slices.Sort(user)
	return append(names, user...)
}

func (t *fakeTable) save(table string) string {
	var b strings.Builder
	b.WriteString("*" + table + "\n")
	names := t.order(table)
	for _, n := range names {
		c := t.chains[n]
		policy := "-"
		if c.builtin {
			policy = c.policy
		}
		b.WriteString(":" + n + " " + policy + " [0:0]\n")
	}
	for _, n := range names {
		for _, r := range t.chains[n].rules {
			b.WriteString("-A " + n + " " + renderArgs(r) + "\n")
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// renderArgs joins a rule's arguments, quoting those with a space.
func renderArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t") {
			a = `"` + a + `"`
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// splitArgs splits a line into arguments as iptables-restore does:
// spaces separate them, double quotes group them. An argument without
// quotes, or quoted whole, is a substring of line: a read-back table at
// 10k Services is 130k rules, and copying every argument was the largest
// share of what reading it allocated.
func splitArgs(line string) ([]string, error) {
	out := make([]string, 0, 16)
	for i := 0; i < len(line); {
		if c := line[i]; c == ' ' || c == '\t' {
			i++
			continue
		}
		// One argument: up to the next space or tab outside quotes.
		start, quotes, in := i, 0, false
		for ; i < len(line); i++ {
			c := line[i]
			if c == '"' {
				in = !in
				quotes++
			} else if (c == ' ' || c == '\t') && !in {
				break
			}
		}
		if in {
			return nil, errors.New("unterminated quote")
		}
		arg := line[start:i]
		switch {
		case quotes == 0:
		case quotes == 2 && arg[0] == '"' && arg[len(arg)-1] == '"':
			arg = arg[1 : len(arg)-1]
		default:
			arg = strings.ReplaceAll(arg, `"`, "")
		}
		out = append(out, arg)
	}
	return out, nil
}

// clone returns a working copy of t, which copies a chain the first time
// it changes it (mut), so that t stays as it was until COMMIT.
func (t *fakeTable) clone() *fakeTable {
	c := &fakeTable{chains: make(map[string]*fakeChain, len(t.chains)), owned: map[string]bool{}}
	for n, ch := range t.chains {
		c.chains[n] = ch
	}
	return c
}

// mut returns chain name of a working copy, copied if it is not yet.
func (t *fakeTable) mut(name string) *fakeChain {
	c := t.chains[name]
	if c == nil || t.owned == nil || t.owned[name] {
		return c
	}
	cc := *c
	cc.rules = slices.Clone(c.rules)
	t.chains[name], t.owned[name] = &cc, true
	return &cc
}

func (f *Fake) restore(ctx context.Context, write xtables.Input) error {
	var in bytes.Buffer
	if err := write(&in); err != nil {
		return err
	}
	input := in.Bytes()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	f.restores = append(f.restores, string(input))
	var (
		table string
		work  *fakeTable
	)
	for i, line := range strings.Split(string(input), "\n") {
		fail := func(err error) error { return &LineError{Line: i + 1, Text: line, Err: err} }
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			if work != nil {
				return fail(fmt.Errorf("table %s not committed", table))
			}
			table = line[1:]
			t := f.tables[table]
			if t == nil {
				return fail(fmt.Errorf("can't initialize iptables table %q: table does not exist", table))
			}
			work = t.clone()
		case work == nil:
			return fail(errors.New("no table given"))
		case line == "COMMIT":
			work.owned = nil
			f.tables[table], work = work, nil
		case strings.HasPrefix(line, ":"):
			if err := work.declare(line[1:]); err != nil {
				return fail(err)
			}
		default:
			args, err := splitArgs(line)
			if err != nil {
				return fail(err)
			}
			if err := work.command(table, args, f); err != nil {
				return fail(err)
			}
		}
	}
	if work != nil {
		return &LineError{Line: strings.Count(string(input), "\n") + 1, Err: fmt.Errorf("table %s: no COMMIT", table)}
	}
	return nil
}

// declare applies a ":CHAIN POLICY [p:b]" line.
func (t *fakeTable) declare(decl string) error {
	fields := strings.Fields(decl)
	if len(fields) < 2 {
		return fmt.Errorf("bad chain declaration %q", decl)
	}
	name, policy := fields[0], fields[1]
	if c := t.mut(name); c != nil && c.builtin {
		if policy != targetAccept && policy != targetDrop {
			return fmt.Errorf("chain %s: bad policy %q", name, policy)
		}
		c.policy = policy
		return nil
	}
	if policy != "-" {
		return fmt.Errorf("chain %s: a policy for a user-defined chain", name)
	}
	if c := t.chains[name]; c != nil {
		c.rules = nil
		return nil
	}
	return t.newChain(name)
}

func (t *fakeTable) newChain(name string) error {
	if len(name) > MaxChainName || name == "" || strings.HasPrefix(name, "-") {
		return fmt.Errorf("invalid chain name %q", name)
	}
	if t.chains[name] != nil {
		return fmt.Errorf("chain %s already exists", name)
	}
	t.chains[name] = &fakeChain{}
	if t.owned != nil {
		t.owned[name] = true
	}
	return nil
}

// command applies one "-A", "-I", "-D", "-F", "-N" or "-X" line.
func (t *fakeTable) command(table string, args []string, f *Fake) error {
	if len(args) < 2 {
		return fmt.Errorf("bad command %q", strings.Join(args, " "))
	}
	op, name, rule := args[0], args[1], args[2:]
	c := t.chains[name]
	switch op {
	case "-N":
		return t.newChain(name)
	case "-X":
		switch {
		case c == nil:
			return fmt.Errorf("chain %s: no such chain", name)
		case c.builtin:
			return fmt.Errorf("chain %s: cannot delete a built-in chain", name)
		}
		if by := t.referrer(name); by != "" {
			return fmt.Errorf("chain %s: too many links: a rule of %s jumps to it", name, by)
		}
		delete(t.chains, name)
		return nil
	}
	if c == nil {
		return fmt.Errorf("chain %s: no such chain", name)
	}
	c = t.mut(name)
	switch op {
	case "-F":
		c.rules = nil
	case "-A", "-I":
		if op == "-I" && len(rule) > 0 {
			if _, err := strconv.Atoi(rule[0]); err == nil {
				return errors.New("-I with a rule number: not supported by the fake")
			}
		}
		if err := t.checkRule(table, rule, f); err != nil {
			return fmt.Errorf("chain %s: %w", name, err)
		}
		r := slices.Clone(rule)
		if op == "-A" {
			c.rules = append(c.rules, r)
		} else {
			c.rules = slices.Insert(c.rules, 0, r)
		}
	case "-D":
		if i := slices.IndexFunc(c.rules, func(r []string) bool { return slices.Equal(r, rule) }); i >= 0 {
			c.rules = slices.Delete(c.rules, i, i+1)
		} else {
			return fmt.Errorf("chain %s: bad rule (does a matching rule exist in that chain?)", name)
		}
	default:
		return fmt.Errorf("unknown command %q", op)
	}
	return nil
}

// checkRule checks a rule's matches and target.
func (t *fakeTable) checkRule(table string, rule []string, f *Fake) error {
	for i := 0; i < len(rule); i++ {
		switch rule[i] {
		case "-m", "--match":
			if i+1 >= len(rule) || !slices.Contains(knownMatches, rule[i+1]) || f.missing[rule[i+1]] {
				return fmt.Errorf("couldn't load match %q: no such file or directory", at(rule, i+1))
			}
		case "--match-set":
			if f.sets[at(rule, i+1)] == nil {
				return fmt.Errorf("set %s doesn't exist", at(rule, i+1))
			}
			if at(rule, i+2) != "dst,dst,src" {
				return fmt.Errorf("set %s: flags %q, the fake knows dst,dst,src", at(rule, i+1), at(rule, i+2))
			}
		case "-j", "-g":
			target := at(rule, i+1)
			if slices.Contains(tableTargets[table], target) {
				continue
			}
			c := t.chains[target]
			switch {
			case c == nil && (target == targetDNAT || target == targetMasquerade || target == targetReject):
				return fmt.Errorf("target %s is not valid in the %s table", target, table)
			case c == nil:
				return fmt.Errorf("couldn't load target %q: no such file or directory", target)
			case c.builtin:
				return fmt.Errorf("cannot jump to built-in chain %s", target)
			}
		}
	}
	return nil
}

func at(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

// referrer returns the chain of a rule that jumps to name, or "".
func (t *fakeTable) referrer(name string) string {
	for n, c := range t.chains {
		for _, r := range c.rules {
			for i := 0; i+1 < len(r); i++ {
				if (r[i] == "-j" || r[i] == "-g") && r[i+1] == name {
					return n
				}
			}
		}
	}
	return ""
}

func (f *Fake) save(ctx context.Context, table string, w io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tables[table]
	if t == nil {
		return fmt.Errorf("table %s does not exist", table)
	}
	_, err := io.WriteString(w, t.save(table))
	return err
}

func (f *Fake) chainExists(ctx context.Context, table, chain string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tables[table]
	if t == nil {
		return false, fmt.Errorf("table %s does not exist", table)
	}
	return t.chains[chain] != nil, nil
}

func (f *Fake) ensureRule(ctx context.Context, table, chain string, args ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tables[table]
	if t == nil {
		return false, fmt.Errorf("table %s does not exist", table)
	}
	c := t.chains[chain]
	if c == nil {
		return false, fmt.Errorf("chain %s of table %s does not exist", chain, table)
	}
	if slices.ContainsFunc(c.rules, func(r []string) bool { return slices.Equal(r, args) }) {
		return true, nil
	}
	if err := t.checkRule(table, args, f); err != nil {
		return false, err
	}
	c.rules = slices.Insert(c.rules, 0, slices.Clone(args))
	return false, nil
}

func (f *Fake) deleteRule(ctx context.Context, table, chain string, args ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tables[table]
	if t == nil || t.chains[chain] == nil {
		return nil
	}
	c := t.chains[chain]
	c.rules = slices.DeleteFunc(c.rules, func(r []string) bool { return slices.Equal(r, args) })
	return nil
}

func (f *Fake) hasRandomFully() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.randomFully
}

func (f *Fake) routeLocalnet(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.localnet = true
	return nil
}

func (f *Fake) close() error { return nil }

// lackMatch makes the Fake refuse match name, as a kernel without its
// module does.
func (f *Fake) lackMatch(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missing == nil {
		f.missing = map[string]bool{}
	}
	f.missing[name] = true
}

// lastRestore returns the input of the last restore applied, for tests.
func (f *Fake) lastRestore() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.restores) == 0 {
		return ""
	}
	return f.restores[len(f.restores)-1]
}

// The hairpin sets. Like the kernel, the Fake refuses a rule that matches
// a missing set, and the destruction of a set a rule matches.

// maxSetName is the longest ipset name (IPSET_MAXNAMELEN, 32 with the
// terminating zero).
const maxSetName = 31

func (f *Fake) ensureSet(ctx context.Context, name string, family backends.Family) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(name) > maxSetName || name == "" {
		return fmt.Errorf("create ipset %q: invalid name", name)
	}
	if s := f.sets[name]; s != nil {
		if s.family != family {
			return fmt.Errorf("create ipset %s: it exists with family %s", name, s.family.String())
		}
		return nil
	}
	f.sets[name] = &fakeSet{family: family, entries: map[HairpinEntry]bool{}}
	return nil
}

// set returns set name, or an error wrapping fs.ErrNotExist (as the
// kernel's ENOENT does).
func (f *Fake) set(name string) (*fakeSet, error) {
	s := f.sets[name]
	if s == nil {
		return nil, fmt.Errorf("ipset %s: %w", name, fs.ErrNotExist)
	}
	return s, nil
}

func (f *Fake) listSet(ctx context.Context, name string) ([]HairpinEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.set(name)
	if err != nil {
		return nil, err
	}
	return slices.Collect(maps.Keys(s.entries)), nil
}

func (f *Fake) addToSet(ctx context.Context, name string, entries []HairpinEntry) error {
	return f.changeSet(name, entries, true)
}

func (f *Fake) delFromSet(ctx context.Context, name string, entries []HairpinEntry) error {
	return f.changeSet(name, entries, false)
}

// changeSet adds entries to set name, or deletes them.
func (f *Fake) changeSet(name string, entries []HairpinEntry, add bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.set(name)
	if err != nil {
		return err
	}
	for _, e := range entries {
		switch {
		case !add:
			delete(s.entries, e)
		case e.Addr.Is4() != (s.family == backends.IPv4) || !e.Protocol.Valid():
			return fmt.Errorf("add to ipset %s entry %s: invalid for the set", name, e)
		default:
			s.entries[e] = true
		}
	}
	return nil
}

func (f *Fake) destroySet(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sets[name] == nil {
		return nil
	}
	for table, t := range f.tables {
		for chain, c := range t.chains {
			for _, r := range c.rules {
				if i := slices.Index(r, "--match-set"); i >= 0 && at(r, i+1) == name {
					return fmt.Errorf("destroy ipset %s: a rule of %s %s still uses it", name, table, chain)
				}
			}
		}
	}
	delete(f.sets, name)
	return nil
}

// setEntries returns the entries of set name, as ipset writes them.
func (f *Fake) setEntries(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	if s := f.sets[name]; s != nil {
		for e := range s.entries {
			out = append(out, e.String())
		}
	}
	slices.Sort(out)
	return out
}
