package iptables

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// A full sync reads the tables back with iptables-save and writes only
// the chains whose rules differ from the plan. iptables-save does not
// show a rule as it was written: it puts the addresses and protocol
// first, adds the defaults of matches and targets ("--mask
// 255.255.255.255 --rsource" of recent, "--reject-with
// icmp-port-unreachable"), spells MARK's "--or-mark M" as "--set-xmark
// M/M", and rounds probabilities to the kernel's 31 bits. canonRule maps
// both spellings of a rule to one string: its options as sorted
// "name=value" items, with those differences undone, and the order of
// its statistic, recent and set matches, the matches whose order
// changes what the rule does. It knows the
// options wasp writes; a rule with any other cannot be compared, and its
// chain is written again.

// canonRule returns the canonical form of a rule's arguments, and false
// when the rule has an option canonRule does not know.
func canonRule(args []string) (string, bool) {
	items := make([]string, 0, len(args)/2)
	// The order of the matches with an effect (recent --set) or a chance
	// (statistic), which sorting loses: "-m statistic ... -m recent
	// --set" records only the connections the statistic match took.
	var order []string
	neg := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "!" {
			neg = "!"
			continue
		}
		val := func() (string, bool) {
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		var item string
		switch a {
		case "-s", "-d":
			v, ok := val()
			p, err := parsePrefix(v)
			if !ok || err != nil {
				return "", false
			}
			item = a + "=" + p.String()
		case "--match-set":
			name, ok := val()
			flags, ok2 := val()
			if !ok || !ok2 {
				return "", false
			}
			item = a + "=" + name + "," + flags
		case "-p", "-m", "-j", "--comment", "--dport", "--src-type", "--dst-type", "--mode", "--name", "--seconds", "--to-destination":
			v, ok := val()
			if !ok {
				return "", false
			}
			item = a + "=" + v
			if a == "-m" && (v == "statistic" || v == "recent" || v == "set") {
				order = append(order, v)
			}
		case "--ctstate":
			v, ok := val()
			if !ok {
				return "", false
			}
			states := strings.Split(v, ",")
			slices.Sort(states)
			item = a + "=" + strings.Join(states, ",")
		case "--probability":
			v, ok := val()
			p, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil {
				return "", false
			}
			// The kernel keeps round(p * 2^31).
			item = a + "=" + strconv.FormatInt(int64(math.Round(p*(1<<31))), 10)
		case "--mark", "--set-xmark":
			v, ok := val()
			m, err := canonMark(v)
			if !ok || err != nil {
				return "", false
			}
			item = a + "=" + m
		case "--or-mark", "--xor-mark":
			v, ok := val()
			x, err := strconv.ParseUint(v, 0, 32)
			if !ok || err != nil {
				return "", false
			}
			mask := x // or: set the bits of x
			if a == "--xor-mark" {
				mask = 0 // xor: flip them, keep the rest
			}
			item = fmt.Sprintf("--set-xmark=0x%x/0x%x", x, mask)
		case "--mask":
			v, ok := val()
			if !ok || (v != "255.255.255.255" && v != "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff") {
				return "", false
			}
			continue // recent's default
		case "--reject-with":
			v, ok := val()
			if !ok || (v != "icmp-port-unreachable" && v != "icmp6-port-unreachable") {
				return "", false
			}
			continue // REJECT's default
		case "--rsource":
			continue // recent's default
		case "--rcheck", "--set", "--reap", "--random-fully":
			item = a
		default:
			return "", false
		}
		items = append(items, neg+item)
		neg = ""
	}
	slices.Sort(items)
	if len(order) > 1 {
		items = append(items, "order="+strings.Join(order, ","))
	}
	return strings.Join(items, " "), true
}

// parsePrefix parses an address or a prefix, as -s and -d take them.
func parsePrefix(v string) (netip.Prefix, error) {
	if !strings.Contains(v, "/") {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return netip.Prefix{}, err
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(v)
	return p.Masked(), err
}

// canonMark parses "value[/mask]" as "0xVALUE/0xMASK".
func canonMark(v string) (string, error) {
	val, mask, hasMask := strings.Cut(v, "/")
	x, err := strconv.ParseUint(val, 0, 32)
	if err != nil {
		return "", err
	}
	m := uint64(math.MaxUint32)
	if hasMask {
		if m, err = strconv.ParseUint(mask, 0, 32); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("0x%x/0x%x", x, m), nil
}

// savedTable is what iptables-save shows of a table, read line by line
// (line) against the plan of the table, so that neither the output nor
// its rules are ever in memory whole: for each chain of the plan,
// whether the table holds it with the same rules as far as canonRule can
// tell; the chains of wasp's that no plan wants; and the jumps to wasp's
// chains from the others.
type savedTable struct {
	plan   map[string]*savedChain // the plan's chains of the table, by name
	wanted map[string]bool        // the chains of every table's plan
	// stale are the chains of wasp's the table holds and wanted lacks.
	stale []string
	// jumps are the canonical rules of other chains (the built-in ones)
	// that jump to one of wasp's.
	jumps map[string][]string
	err   error // of the first line that could not be read
	// record: keep the hash of each rule line of the plan's chains
	// (savedChain.lines), for the next drift check.
	record bool
}

// verifiedChain is a chain of wasp's as a drift check last found it the
// same as the plan: the hash of the plan's rules and of each rule line as
// iptables-save showed it (lineHash). A later check compares a line whose
// hash is the one at its position as the same, without parsing it, as
// long as the plan's rules have the same hash.
type verifiedChain struct {
	want  uint64
	lines []uint64
}

// lineHash is the 64-bit FNV-1a hash of s.
func lineHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// rulesHash is the hash of a chain's rules, each ended by a newline.
func rulesHash(rules []string) uint64 {
	h := uint64(14695981039346656037)
	for _, r := range rules {
		for i := 0; i <= len(r); i++ {
			b := byte('\n')
			if i < len(r) {
				b = r[i]
			}
			h ^= uint64(b)
			h *= 1099511628211
		}
	}
	return h
}

// savedChain is what the table holds of a chain of the plan.
type savedChain struct {
	want     *Chain
	declared bool
	rules    int  // of its rules read so far, all equal to want's
	differs  bool // a rule differs, or cannot be compared
	saved    int  // its rules in the table
	// known are the line hashes of the chain's last verification, when
	// the plan's rules are the same; lines those of the rules read so
	// far, when the table records them.
	known, lines []uint64
}

// newSavedTable returns a savedTable for the chains plan of a table;
// wanted are the chains of the plans of every table.
func newSavedTable(plan []*Chain, wanted map[string]bool) *savedTable {
	t := &savedTable{plan: make(map[string]*savedChain, len(plan)), wanted: wanted, jumps: map[string][]string{}}
	for _, c := range plan {
		t.plan[c.Name] = &savedChain{want: c}
	}
	return t
}

// recordLines makes t keep the line hashes of the plan's chains and take
// those of known (by chain name) as the same, where the plan's rules are
// those known was verified against.
func (t *savedTable) recordLines(known map[string]verifiedChain) {
	t.record = true
	for name, c := range t.plan {
		if k, ok := known[name]; ok && k.want == rulesHash(c.want.Rules) {
			c.known = k.lines
		}
	}
}

// verified returns the chains of the plan that t found the same, as
// verifiedChains; t must record lines.
func (t *savedTable) verified(into map[string]verifiedChain) {
	for name, c := range t.plan {
		if t.same(c.want) {
			into[name] = verifiedChain{want: rulesHash(c.want.Rules), lines: c.lines}
		}
	}
}

// line reads one line of iptables-save output, without its newline.
func (t *savedTable) line(line string) {
	if t.err != nil {
		return
	}
	if name, ok := chainName(line); ok {
		if c := t.plan[name]; c != nil {
			c.declared = true
		} else if strings.HasPrefix(name, Prefix) && !t.wanted[name] {
			t.stale = append(t.stale, strings.Clone(name))
		}
		return
	}
	switch {
	case strings.HasPrefix(line, "-A "+Prefix):
		chain, _, _ := strings.Cut(line[len("-A "):], " ")
		c := t.plan[chain]
		if c == nil {
			return // a chain the plan lacks goes, whatever its rules
		}
		c.saved++
		if c.differs {
			return
		}
		var h uint64
		if t.record {
			h = lineHash(line)
			if c.rules < len(c.known) && c.known[c.rules] == h && c.rules < len(c.want.Rules) {
				c.rules++
				c.lines = append(c.lines, h)
				return
			}
		}
		args, err := splitArgs(line)
		if err != nil || len(args) < 2 {
			t.err = fmt.Errorf("iptables-save line %q: %v", line, err)
			return
		}
		if c.read(args[2:]) && t.record {
			c.lines = append(c.lines, h)
		}
	case strings.HasPrefix(line, "-A ") && strings.Contains(line, " -j "+Prefix):
		args, err := splitArgs(line)
		if err != nil || len(args) < 2 {
			t.err = fmt.Errorf("iptables-save line %q: %v", line, err)
			return
		}
		if c, ok := canonRule(args[2:]); ok {
			t.jumps[args[1]] = append(t.jumps[args[1]], c)
		}
	}
}

// read compares the next rule of the chain, as iptables-save shows its
// arguments, with the plan's, and reports whether they are the same.
func (c *savedChain) read(saved []string) bool {
	if c.rules == len(c.want.Rules) {
		c.differs = true
		return false
	}
	got, ok := canonRule(saved)
	args, err := splitArgs(c.want.Rules[c.rules])
	if !ok || err != nil {
		c.differs = true
		return false
	}
	if want, ok := canonRule(args); !ok || want != got {
		c.differs = true
		return false
	}
	c.rules++
	return true
}

// same reports whether chain c of the plan is in the table with the same
// rules, as far as canonRule can tell.
func (t *savedTable) same(c *Chain) bool {
	s := t.plan[c.Name]
	return s != nil && s.declared && !s.differs && s.rules == len(c.Rules)
}

// hasJump reports whether j is in its built-in chain, as far as
// canonRule can tell.
func (t *savedTable) hasJump(j jump) bool {
	c, ok := canonRule(j.args())
	return ok && slices.Contains(t.jumps[j.from], c)
}
