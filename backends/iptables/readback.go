package iptables

import (
	"bufio"
	"bytes"
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

// savedTable is what iptables-save shows of a table: its chains, and the
// canonical rules of wasp's (nil for a chain with a rule canonRule cannot
// read).
type savedTable struct {
	chains []string
	rules  map[string][]string
	// jumps are the canonical rules of other chains (the built-in ones)
	// that jump to one of wasp's.
	jumps map[string][]string
}

// readSave reads iptables-save output of one table.
func readSave(save []byte) (*savedTable, error) {
	t := &savedTable{rules: map[string][]string{}, jumps: map[string][]string{}}
	unreadable := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			t.chains = append(t.chains, name)
		case strings.HasPrefix(line, "-A "+Prefix):
			args, err := splitArgs(line)
			if err != nil || len(args) < 2 {
				return nil, fmt.Errorf("iptables-save line %q: %v", line, err)
			}
			chain := args[1]
			c, ok := canonRule(args[2:])
			if !ok {
				unreadable[chain] = true
			}
			t.rules[chain] = append(t.rules[chain], c)
		case strings.HasPrefix(line, "-A ") && strings.Contains(line, " -j "+Prefix):
			args, err := splitArgs(line)
			if err != nil || len(args) < 2 {
				return nil, fmt.Errorf("iptables-save line %q: %v", line, err)
			}
			if c, ok := canonRule(args[2:]); ok {
				t.jumps[args[1]] = append(t.jumps[args[1]], c)
			}
		}
	}
	for chain := range unreadable {
		t.rules[chain] = nil
	}
	return t, sc.Err()
}

// same reports whether chain c is in the table with the same rules, as
// far as canonRule can tell.
func (t *savedTable) same(c *Chain) bool {
	got, ok := t.rules[c.Name]
	if !ok {
		return len(c.Rules) == 0 && slices.Contains(t.chains, c.Name)
	}
	if got == nil || len(got) != len(c.Rules) {
		return false
	}
	for i, r := range c.Rules {
		args, err := splitArgs(r)
		if err != nil {
			return false
		}
		want, ok := canonRule(args)
		if !ok || want != got[i] {
			return false
		}
	}
	return true
}

// hasJump reports whether j is in its built-in chain, as far as
// canonRule can tell.
func (t *savedTable) hasJump(j jump) bool {
	c, ok := canonRule(j.args())
	return ok && slices.Contains(t.jumps[j.from], c)
}
