package iptables

import (
	"slices"
	"testing"
)

// TestSplitArgs: spaces and tabs separate arguments, double quotes group
// them and are dropped wherever they are in an argument, as
// iptables-restore reads a line.
func TestSplitArgs(t *testing.T) {
	for _, tt := range []struct {
		line string
		want []string
	}{
		{"", []string{}},
		{"  \t ", []string{}},
		{"-A WASP-SVC-X -j DNAT", []string{"-A", "WASP-SVC-X", "-j", "DNAT"}},
		{" a\t\tb  ", []string{"a", "b"}},
		{`--comment "demo/web:http cluster IP" -j X`, []string{"--comment", "demo/web:http cluster IP", "-j", "X"}},
		{`--comment "" -j X`, []string{"--comment", "", "-j", "X"}},
		{`a"b c"d e`, []string{"ab cd", "e"}},
		{`"a""b" "x"y`, []string{"ab", "xy"}},
		{"\"tab\tinside\"", []string{"tab\tinside"}},
	} {
		got, err := splitArgs(tt.line)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("splitArgs(%q) = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
	for _, bad := range []string{`"`, `a "b c`, `--comment "x -j X`} {
		if got, err := splitArgs(bad); err == nil {
			t.Errorf("splitArgs(%q) = %q, want an unterminated quote error", bad, got)
		}
	}
}

// TestCanonRule: a rule as wasp writes it and as iptables-save shows it
// (lines taken from both variants' output) are one canonical rule; a
// change of any value is another; an option canonRule does not know makes
// the rule unreadable.
func TestCanonRule(t *testing.T) {
	canon := func(t *testing.T, rule string) (string, bool) {
		t.Helper()
		args, err := splitArgs(rule)
		if err != nil {
			t.Fatal(err)
		}
		return canonRule(args)
	}
	for _, tt := range []struct{ name, ours, saved string }{
		{"masquerade mark", "-j MARK --or-mark 0x4000", "-j MARK --set-xmark 0x4000/0x4000"},
		{"mark clear", "-j MARK --xor-mark 0x4000", "-j MARK --set-xmark 0x4000/0x0"},
		{"mark match", "-m mark ! --mark 0x4000/0x4000 -j RETURN", "-m mark ! --mark 0x4000/0x4000 -j RETURN"},
		{"dispatch", `-m comment --comment "demo/web:http cluster IP" -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j WASP-SVC-X`,
			`-d 10.96.0.10/32 -p tcp -m comment --comment "demo/web:http cluster IP" -m tcp --dport 80 -j WASP-SVC-X`},
		{"affinity check", `-m comment --comment "demo/sticky:http -> 10.244.1.12:8080" -p tcp -m tcp -m recent --name WASP-SEP-Q --rcheck --seconds 10800 --reap -m recent --name WASP-SEP-Q --set -j DNAT --to-destination 10.244.1.12:8080`,
			`-p tcp -m comment --comment "demo/sticky:http -> 10.244.1.12:8080" -m tcp -m recent --rcheck --seconds 10800 --reap --name WASP-SEP-Q --mask 255.255.255.255 --rsource -m recent --set --name WASP-SEP-Q --mask 255.255.255.255 --rsource -j DNAT --to-destination 10.244.1.12:8080`},
		{"affinity set", `-m comment --comment "demo/sticky:http -> 10.244.1.12:8080" -p tcp -m tcp -m statistic --mode random --probability 0.5000000000 -m recent --name WASP-SEP-Q --set -j DNAT --to-destination 10.244.1.12:8080`,
			`-p tcp -m comment --comment "demo/sticky:http -> 10.244.1.12:8080" -m tcp -m statistic --mode random --probability 0.50000000000 -m recent --set --name WASP-SEP-Q --mask 255.255.255.255 --rsource -j DNAT --to-destination 10.244.1.12:8080`},
		{"affinity IPv6", `-m comment --comment x -p udp -m udp -m recent --name WASP-SEP-Q --rcheck --seconds 10800 --reap -m recent --name WASP-SEP-Q --set -j DNAT --to-destination [fd00::1]:8080`,
			`-p udp -m comment --comment x -m udp -m recent --rcheck --seconds 10800 --reap --name WASP-SEP-Q --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -m recent --set --name WASP-SEP-Q --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -j DNAT --to-destination [fd00::1]:8080`},
		{"probability", "-p sctp -m sctp -m statistic --mode random --probability 0.3333333333 -j DNAT --to-destination 10.244.1.12:8080",
			"-p sctp -m sctp -m statistic --mode random --probability 0.33333333349 -j DNAT --to-destination 10.244.1.12:8080"},
		{"hairpin", `-m comment --comment "wasp hairpin traffic: an endpoint reaching itself" -m set --match-set WASP-HAIRPIN dst,dst,src -j MASQUERADE --random-fully`,
			`-m comment --comment "wasp hairpin traffic: an endpoint reaching itself" -m set --match-set WASP-HAIRPIN dst,dst,src -j MASQUERADE --random-fully`},
		{"reject", "-d 10.96.0.13/32 -p tcp -m tcp --dport 80 -j REJECT", "-d 10.96.0.13/32 -p tcp -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"},
		{"martian", `-d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
			`-d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`},
		{"a bare address", "-s 10.244.1.12 -j WASP-MARK-MASQ", "-s 10.244.1.12/32 -j WASP-MARK-MASQ"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, okA := canon(t, tt.ours)
			b, okB := canon(t, tt.saved)
			if !okA || !okB || a != b {
				t.Errorf("ours %q (%v), saved %q (%v): differ", a, okA, b, okB)
			}
		})
	}
	for _, tt := range []struct{ name, a, b string }{
		{"another probability", "-m statistic --mode random --probability 0.5000000000 -j A", "-m statistic --mode random --probability 0.5000100000 -j A"},
		{"negated", "-s 10.0.0.0/8 -j A", "! -s 10.0.0.0/8 -j A"},
		{"another target", "-j A", "-j B"},
		{"another comment", `-m comment --comment "a" -j A`, `-m comment --comment "b" -j A`},
		{"another mark", "-j MARK --or-mark 0x4000", "-j MARK --or-mark 0x8000"},
		{"or and xor", "-j MARK --or-mark 0x4000", "-j MARK --xor-mark 0x4000"},
		{"timeout", "-m recent --name A --rcheck --seconds 10 --reap -j A", "-m recent --name A --rcheck --seconds 11 --reap -j A"},
		{"set before statistic", "-m statistic --mode random --probability 0.5 -m recent --name A --set -j A",
			"-m recent --name A --set -m statistic --mode random --probability 0.5 -j A"},
		{"another set", "-m set --match-set A dst,dst,src -j A", "-m set --match-set B dst,dst,src -j A"},
		{"other set flags", "-m set --match-set A dst,dst,src -j A", "-m set --match-set A src,dst,dst -j A"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := canon(t, tt.a)
			b, _ := canon(t, tt.b)
			if a == b {
				t.Errorf("%q and %q read as the same rule %q", tt.a, tt.b, a)
			}
		})
	}
	for _, rule := range []string{
		"-m recent --name A --rcheck --mask 255.255.255.0 -j A",
		"-j REJECT --reject-with tcp-reset",
		"-i eth0 -j A",
		"-m statistic --mode random --probability",
		"-m set --match-set A",
	} {
		if c, ok := canon(t, rule); ok {
			t.Errorf("%q read as %q; want unreadable", rule, c)
		}
	}
}
