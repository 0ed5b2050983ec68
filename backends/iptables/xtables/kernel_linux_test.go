//go:build linux

package xtables

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/backends"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// These tests run the real binaries of both variants in throwaway
// network namespaces. They need root, and skip a variant whose binaries
// are missing.

// eachVariant runs f for both variants as subtests, each with a Runner
// of family in a namespace of its own.
func eachVariant(t *testing.T, family backends.Family, f func(t *testing.T, r *Runner)) {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel test (-short)")
	}
	for _, v := range []Variant{NFT, Legacy} {
		t.Run(string(v), func(t *testing.T) {
			r, _ := kernelRunner(t, v, family)
			f(t, r)
		})
	}
}

// kernelRunner returns a real Runner of v and family in a new namespace,
// or skips t with the reason it cannot have one.
func kernelRunner(t *testing.T, v Variant, family backends.Family) (*Runner, *netlab.NS) {
	t.Helper()
	lab := netlab.NewForTest(t)
	ns, err := lab.AddNS("xt")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(v, family, ns.Path())
	if errors.Is(err, ErrNotInstalled) {
		t.Skipf("needs the %s variant: %v", v, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, ns
}

// saved returns table's chain declarations and rules as the save binary
// writes them, without comments and the table and COMMIT lines.
func saved(t *testing.T, r *Runner, table string) []string {
	t.Helper()
	out, err := r.Save(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(string(out)) {
		l = strings.TrimSuffix(l, "\n")
		if l == "" || l[0] == '#' || l[0] == '*' || l == "COMMIT" {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// chainRules returns the rules of chain in saved lines, in order.
func chainRules(lines []string, chain string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "-A "+chain+" ") {
			out = append(out, l)
		}
	}
	return out
}

// declared reports whether saved lines declare chain.
func declared(lines []string, chain string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, ":"+chain+" ") })
}

func restore(t *testing.T, r *Runner, input string) {
	t.Helper()
	if err := r.Restore(context.Background(), []byte(input)); err != nil {
		t.Fatal(err)
	}
}

func TestKernelRestoreSaveRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		family backends.Family
		addr   string
	}{
		{backends.IPv4, "10.96.0.10/32"},
		{backends.IPv6, "fd00:96::10/128"},
	} {
		t.Run(tc.family.String(), func(t *testing.T) {
			eachVariant(t, tc.family, func(t *testing.T, r *Runner) {
				// In the save binaries' own spelling, so that what
				// goes in comes out unchanged. The binaries order
				// chains their own way; rules keep their order.
				chains := []string{"WASP-SERVICES", "WASP-SVC-A", "WASP-SEP-1", "WASP-SEP-2"}
				want := []string{
					"-A WASP-SERVICES -d " + tc.addr + ` -p tcp -m comment --comment "ns/a:http cluster IP" -m tcp --dport 80 -j WASP-SVC-A`,
					"-A WASP-SVC-A -m statistic --mode random --probability 0.25000000000 -j WASP-SEP-1",
					"-A WASP-SVC-A -j WASP-SEP-2",
					"-A WASP-SEP-1 -p tcp -m tcp -j DNAT --to-destination :8080",
					"-A WASP-SEP-2 -p tcp -m tcp -j DNAT --to-destination :8081",
				}
				input := "*nat\n"
				for _, c := range chains {
					input += ":" + c + " - [0:0]\n"
				}
				restore(t, r, input+strings.Join(want, "\n")+"\nCOMMIT\n")
				got := saved(t, r, "nat")
				for _, c := range chains {
					if !declared(got, c) {
						t.Errorf("chain %s missing from\n\t%s", c, strings.Join(got, "\n\t"))
					}
					if g, w := chainRules(got, c), chainRules(want, c); !slices.Equal(g, w) {
						t.Errorf("%s is\n\t%s\nwant\n\t%s", c, strings.Join(g, "\n\t"), strings.Join(w, "\n\t"))
					}
				}
			})
		})
	}
}

func TestKernelNoflushLeavesUnnamedChainsAlone(t *testing.T) {
	eachVariant(t, backends.IPv4, func(t *testing.T, r *Runner) {
		ctx := context.Background()
		if err := r.EnsureChain(ctx, "filter", "OTHER"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.EnsureRule(ctx, "filter", "OTHER", "-j", "ACCEPT"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.EnsureRule(ctx, "filter", "INPUT", "-j", "OTHER"); err != nil {
			t.Fatal(err)
		}
		// Twice: a declared chain is flushed before its rules are
		// appended, so the second restore replaces the first's rules.
		for range 2 {
			restore(t, r, "*filter\n:WASP-A - [0:0]\n-A WASP-A -j RETURN\nCOMMIT\n")
		}
		got := saved(t, r, "filter")
		if w := []string{"-A WASP-A -j RETURN"}; !declared(got, "WASP-A") || !slices.Equal(chainRules(got, "WASP-A"), w) {
			t.Errorf("WASP-A is %q, want %q", chainRules(got, "WASP-A"), w)
		}
		if w := []string{"-A OTHER -j ACCEPT"}; !declared(got, "OTHER") || !slices.Equal(chainRules(got, "OTHER"), w) {
			t.Errorf("OTHER is %q, want %q", chainRules(got, "OTHER"), w)
		}
		if w := []string{"-A INPUT -j OTHER"}; !slices.Equal(chainRules(got, "INPUT"), w) {
			t.Errorf("INPUT has %q, want %q", chainRules(got, "INPUT"), w)
		}
	})
}

func TestKernelFailingRestore(t *testing.T) {
	eachVariant(t, backends.IPv4, func(t *testing.T, r *Runner) {
		restore(t, r, "*filter\n:WASP-A - [0:0]\n-A WASP-A -j ACCEPT\nCOMMIT\n")
		before := saved(t, r, "filter")

		const bad = "-A WASP-A -m nosuchmatch -j ACCEPT"
		input := "*filter\n:WASP-A - [0:0]\n:WASP-B - [0:0]\n-A WASP-A -j RETURN\n" + bad + "\n-A WASP-B -j DROP\nCOMMIT\n"
		err := r.Restore(context.Background(), []byte(input))
		var re *RestoreError
		if !errors.As(err, &re) {
			t.Fatalf("Restore = %v, want a *RestoreError", err)
		}
		if re.Line != 5 || re.Text != bad || re.Table != "filter" {
			t.Errorf("Line, Text, Table = %d, %q, %q; want 5, %q, filter (stderr %q)", re.Line, re.Text, re.Table, bad, re.Stderr)
		}
		if !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "nosuchmatch") {
			t.Errorf("Error() = %q, want the failing line and the binary's message", err)
		}
		if after := saved(t, r, "filter"); !slices.Equal(after, before) {
			t.Errorf("the failed restore changed filter:\n\t%s\nwas\n\t%s", strings.Join(after, "\n\t"), strings.Join(before, "\n\t"))
		}
	})
}

// A restore binary that fails on an early line of a streamed input far
// larger than a pipe holds stops reading; RestoreFrom still returns its
// error, naming the line, instead of waiting on the rest of the input.
func TestKernelRestoreFromFailsEarly(t *testing.T) {
	eachVariant(t, backends.IPv4, func(t *testing.T, r *Runner) {
		const bad = "-A WASP-A -m nosuchmatch -j ACCEPT"
		input := func(w io.Writer) error {
			if _, err := io.WriteString(w, "*filter\n:WASP-A - [0:0]\n"+bad+"\n"); err != nil {
				return err
			}
			for range 200000 { // 5 MB
				if _, err := io.WriteString(w, "-A WASP-A -j ACCEPT\n"); err != nil {
					return err
				}
			}
			_, err := io.WriteString(w, "COMMIT\n")
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := r.RestoreFrom(ctx, input)
		var re *RestoreError
		if !errors.As(err, &re) {
			t.Fatalf("RestoreFrom = %v, want a *RestoreError", err)
		}
		if re.Line != 3 || re.Text != bad || re.Table != "filter" {
			t.Errorf("Line, Text, Table = %d, %q, %q; want 3, %q, filter (stderr %q)", re.Line, re.Text, re.Table, bad, re.Stderr)
		}
		if declared(saved(t, r, "filter"), "WASP-A") {
			t.Error("the failed restore created WASP-A")
		}
	})
}

// Both variants commit each table at its COMMIT: a later table's failure
// leaves the earlier ones committed and its own table as it was. The
// kernel refuses REJECT in nat; iptables-nft names the rule,
// iptables-legacy the table's COMMIT line.
func TestKernelRestoreCommitsTableByTable(t *testing.T) {
	eachVariant(t, backends.IPv4, func(t *testing.T, r *Runner) {
		restore(t, r, "*nat\n:WASP-N - [0:0]\n-A WASP-N -j RETURN\nCOMMIT\n")
		natBefore := saved(t, r, "nat")

		input := "*filter\n:WASP-F - [0:0]\n-A WASP-F -j ACCEPT\nCOMMIT\n" +
			"*nat\n:WASP-N - [0:0]\n-A WASP-N -j ACCEPT\n-A WASP-N -p tcp -j REJECT\nCOMMIT\n"
		err := r.Restore(context.Background(), []byte(input))
		var re *RestoreError
		if !errors.As(err, &re) {
			t.Fatalf("Restore = %v, want a *RestoreError", err)
		}
		wantLine, wantText := 8, "-A WASP-N -p tcp -j REJECT"
		if r.Variant() == Legacy {
			wantLine, wantText = 9, "COMMIT"
		}
		if re.Line != wantLine || re.Text != wantText || re.Table != "nat" {
			t.Errorf("Line, Text, Table = %d, %q, %q; want %d, %q, nat (stderr %q)", re.Line, re.Text, re.Table, wantLine, wantText, re.Stderr)
		}
		if got, w := chainRules(saved(t, r, "filter"), "WASP-F"), []string{"-A WASP-F -j ACCEPT"}; !slices.Equal(got, w) {
			t.Errorf("filter's WASP-F is %q, want %q: committed before nat failed", got, w)
		}
		if after := saved(t, r, "nat"); !slices.Equal(after, natBefore) {
			t.Errorf("the failed table changed:\n\t%s\nwas\n\t%s", strings.Join(after, "\n\t"), strings.Join(natBefore, "\n\t"))
		}
	})
}

func TestKernelEnsureRuleIdempotent(t *testing.T) {
	eachVariant(t, backends.IPv6, func(t *testing.T, r *Runner) {
		ctx := context.Background()
		for range 2 {
			if err := r.EnsureChain(ctx, "nat", "WASP-SERVICES"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.EnsureRule(ctx, "nat", "OUTPUT", "-j", "RETURN"); err != nil {
			t.Fatal(err)
		}
		jump := []string{"-m", "comment", "--comment", "wasp service portals", "-j", "WASP-SERVICES"}
		for i, want := range []bool{false, true, true} {
			existed, err := r.EnsureRule(ctx, "nat", "OUTPUT", jump...)
			if err != nil {
				t.Fatal(err)
			}
			if existed != want {
				t.Errorf("call %d: existed = %v, want %v", i+1, existed, want)
			}
		}
		// Inserted first, once.
		got := chainRules(saved(t, r, "nat"), "OUTPUT")
		want := []string{`-A OUTPUT -m comment --comment "wasp service portals" -j WASP-SERVICES`, "-A OUTPUT -j RETURN"}
		if !slices.Equal(got, want) {
			t.Errorf("OUTPUT is\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
	})
}

func TestKernelDeleteChain(t *testing.T) {
	eachVariant(t, backends.IPv4, func(t *testing.T, r *Runner) {
		ctx := context.Background()
		restore(t, r, "*filter\n:WASP-X - [0:0]\n-A WASP-X -j ACCEPT\n-A INPUT -j WASP-X\nCOMMIT\n")
		if ok, err := r.ChainExists(ctx, "filter", "WASP-X"); err != nil || !ok {
			t.Fatalf("ChainExists = %v, %v; want true", ok, err)
		}
		// A chain a rule jumps to cannot go.
		if err := r.DeleteChain(ctx, "filter", "WASP-X"); err == nil {
			t.Error("DeleteChain of a chain INPUT jumps to succeeded")
		}
		for range 2 { // the second finds nothing to delete
			if err := r.DeleteRule(ctx, "filter", "INPUT", "-j", "WASP-X"); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 { // the second finds no chain
			if err := r.DeleteChain(ctx, "filter", "WASP-X"); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := r.ChainExists(ctx, "filter", "WASP-X"); err != nil || ok {
			t.Errorf("ChainExists after DeleteChain = %v, %v; want false", ok, err)
		}
		if got := chainRules(saved(t, r, "filter"), "INPUT"); len(got) != 0 {
			t.Errorf("INPUT keeps %q", got)
		}
		// Deleting a rule of a missing chain, or one jumping to a
		// missing chain, is no error either.
		if err := r.DeleteRule(ctx, "filter", "WASP-X", "-j", "ACCEPT"); err != nil {
			t.Error(err)
		}
		if err := r.DeleteRule(ctx, "filter", "INPUT", "-j", "WASP-X"); err != nil {
			t.Error(err)
		}
		// A rule with a match the binary lacks is an error, not a
		// missing rule.
		if err := r.DeleteRule(ctx, "filter", "INPUT", "-m", "nosuchmatch", "-j", "ACCEPT"); err == nil || !strings.Contains(err.Error(), "nosuchmatch") {
			t.Errorf("DeleteRule with an unknown match = %v, want an error naming it", err)
		}
	})
}

// A Runner's binaries run in its namespace only: a chain made in one is
// not in another.
func TestKernelRunsInItsNamespace(t *testing.T) {
	eachVariant(t, backends.IPv4, func(t *testing.T, r *Runner) {
		ctx := context.Background()
		lab := netlab.NewForTest(t)
		other, err := lab.AddNS("other")
		if err != nil {
			t.Fatal(err)
		}
		r2, err := New(r.Variant(), backends.IPv4, other.Path())
		if err != nil {
			t.Fatal(err)
		}
		if err := r.EnsureChain(ctx, "filter", "WASP-HERE"); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.ChainExists(ctx, "filter", "WASP-HERE"); err != nil || !ok {
			t.Fatalf("ChainExists in its namespace = %v, %v; want true", ok, err)
		}
		if ok, err := r2.ChainExists(ctx, "filter", "WASP-HERE"); err != nil || ok {
			t.Errorf("ChainExists in another namespace = %v, %v; want false", ok, err)
		}
	})
}

func TestKernelDetect(t *testing.T) {
	if testing.Short() {
		t.Skip("kernel test (-short)")
	}
	// rules restores n rules into filter.
	rules := func(n int) string {
		in := "*filter\n:WASP-R - [0:0]\n"
		for range n {
			in += "-A WASP-R -j RETURN\n"
		}
		return in + "COMMIT\n"
	}
	for _, tc := range []struct {
		name       string
		hint       Variant // where KUBE-IPTABLES-HINT is made, "" for nowhere
		rules      map[Variant]int
		want       Variant
		wantReason string
	}{
		{name: "the hint in legacy beats nft's rules", hint: Legacy, rules: map[Variant]int{NFT: 3},
			want: Legacy, wantReason: "KUBE-IPTABLES-HINT is in the mangle table of iptables-legacy"},
		{name: "the hint in nft beats legacy's rules", hint: NFT, rules: map[Variant]int{Legacy: 3},
			want: NFT, wantReason: "KUBE-IPTABLES-HINT is in the mangle table of iptables-nft"},
		{name: "no hint, more legacy rules", rules: map[Variant]int{Legacy: 3, NFT: 2},
			want: Legacy, wantReason: "iptables-legacy holds 3 rules, iptables-nft 2"},
		{name: "no hint, more nft rules", rules: map[Variant]int{Legacy: 1, NFT: 2},
			want: NFT, wantReason: "iptables-legacy holds 1 rules, iptables-nft 2"},
		{name: "nothing", want: NFT, wantReason: "nft, the default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			nft, ns := kernelRunner(t, NFT, backends.IPv4)
			legacy, err := New(Legacy, backends.IPv4, ns.Path())
			if errors.Is(err, ErrNotInstalled) {
				t.Skipf("needs both variants: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			runners := map[Variant]*Runner{NFT: nft, Legacy: legacy}
			if tc.hint != "" {
				if err := runners[tc.hint].EnsureChain(ctx, "mangle", HintChain); err != nil {
					t.Fatal(err)
				}
			}
			for v, n := range tc.rules {
				restore(t, runners[v], rules(n))
			}
			v, reason, err := Detect(ctx, ns.Path())
			if err != nil {
				t.Fatal(err)
			}
			if v != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("Detect = %s, %q; want %s, %q", v, reason, tc.want, tc.wantReason)
			}
			// Detect created no legacy table: legacy's whole save
			// lists only the tables the case made.
			res, err := osExec{}.run(ctx, ns.Path(), []string{legacy.save}, nil, nil)
			if err != nil || res.code != 0 {
				t.Fatalf("%s: %v, %d: %s", legacy.save, err, res.code, res.stderr)
			}
			var tables []string
			for l := range strings.Lines(string(res.stdout)) {
				if t, ok := strings.CutPrefix(l, "*"); ok {
					tables = append(tables, strings.TrimSpace(t))
				}
			}
			var want []string
			if tc.hint == Legacy {
				want = append(want, "mangle")
			}
			if tc.rules[Legacy] > 0 {
				want = append(want, "filter")
			}
			slices.Sort(tables)
			slices.Sort(want)
			if !slices.Equal(tables, want) {
				t.Errorf("iptables-legacy has tables %q after Detect, want %q", tables, want)
			}
		})
	}
}

func TestKernelSysctl(t *testing.T) {
	if testing.Short() {
		t.Skip("kernel test (-short)")
	}
	lab := netlab.NewForTest(t)
	a, err := lab.AddNS("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := lab.AddNS("b")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1", "0", "1"} {
		if err := SetSysctl(a.Path(), SysctlRouteLocalnet, v); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadSysctl(a.Path(), SysctlRouteLocalnet); err != nil || got != v {
			t.Errorf("after setting %s: ReadSysctl = %q, %v", v, got, err)
		}
	}
	if got, err := ReadSysctl(b.Path(), "net/ipv4/conf/all/route_localnet"); err != nil || got != "0" {
		t.Errorf("another namespace's route_localnet = %q, %v; want 0", got, err)
	}
	if err := SetSysctl(a.Path(), "net.ipv4.no_such_sysctl", "1"); err == nil || !strings.Contains(err.Error(), "net.ipv4.no_such_sysctl") {
		t.Errorf("SetSysctl of a missing sysctl = %v, want an error naming it", err)
	}
}
