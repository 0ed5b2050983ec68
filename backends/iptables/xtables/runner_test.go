package xtables

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/backends"
)

func TestNewFindsTheVariantsBinaries(t *testing.T) {
	for _, tc := range []struct {
		v      Variant
		family backends.Family
		want   []string // main, save, restore
	}{
		{NFT, backends.IPv4, []string{"iptables-nft", "iptables-nft-save", "iptables-nft-restore"}},
		{NFT, backends.IPv6, []string{"ip6tables-nft", "ip6tables-nft-save", "ip6tables-nft-restore"}},
		{Legacy, backends.IPv4, []string{"iptables-legacy", "iptables-legacy-save", "iptables-legacy-restore"}},
		{Legacy, backends.IPv6, []string{"ip6tables-legacy", "ip6tables-legacy-save", "ip6tables-legacy-restore"}},
	} {
		t.Run(string(tc.v)+"-"+tc.family.String(), func(t *testing.T) {
			// The first directory lacks the binaries, the second has them.
			empty, dir := t.TempDir(), binDir(t, allBinaries...)
			f := &fakeExec{}
			r, err := newRunner(tc.v, tc.family, "/run/netns/x", f, []string{empty, dir})
			if err != nil {
				t.Fatal(err)
			}
			got := []string{r.main, r.save, r.restore}
			for i := range tc.want {
				tc.want[i] = filepath.Join(dir, tc.want[i])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("binaries %q, want %q", got, tc.want)
			}
			calls := f.take()
			if len(calls) != 1 || calls[0].String() != filepath.Base(tc.want[0])+" --version" || calls[0].netns != "/run/netns/x" {
				t.Errorf("New ran %v, want one %s --version in /run/netns/x", calls, filepath.Base(tc.want[0]))
			}
			if r.Variant() != tc.v || r.Family() != tc.family {
				t.Errorf("Variant, Family = %s, %s; want %s, %s", r.Variant(), r.Family(), tc.v, tc.family)
			}
		})
	}
}

func TestNewMissingBinaries(t *testing.T) {
	for _, tc := range []struct {
		name       string
		present    []string
		missing    []string
		stillThere []string // binaries the error must not name
		variant    Variant
		family     backends.Family
	}{
		{name: "none", variant: NFT, family: backends.IPv4,
			missing: []string{"iptables-nft", "iptables-nft-save", "iptables-nft-restore"}},
		{name: "only the main binary", variant: Legacy, family: backends.IPv6, present: []string{"ip6tables-legacy"},
			missing: []string{"ip6tables-legacy-save", "ip6tables-legacy-restore"}, stillThere: []string{"ip6tables-legacy,"}},
		{name: "the other variant's", variant: Legacy, family: backends.IPv4,
			present: []string{"iptables-nft", "iptables-nft-save", "iptables-nft-restore"},
			missing: []string{"iptables-legacy", "iptables-legacy-save", "iptables-legacy-restore"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := binDir(t, tc.present...)
			f := &fakeExec{}
			_, err := newRunner(tc.variant, tc.family, "", f, []string{dir})
			if !errors.Is(err, ErrNotInstalled) {
				t.Fatalf("newRunner = %v, want ErrNotInstalled", err)
			}
			msg := err.Error()
			for _, want := range append(tc.missing, dir, "apt-get install iptables") {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			for _, not := range tc.stillThere {
				if strings.Contains(msg, not) {
					t.Errorf("error %q names %q, which is there", msg, not)
				}
			}
			if calls := f.take(); len(calls) != 0 {
				t.Errorf("ran %v without the binaries", calls)
			}
		})
	}
}

func TestNewVersion(t *testing.T) {
	for _, tc := range []struct {
		name         string
		variant      Variant
		out          string
		wantErr      string // "" for none
		randomFully  bool
		restoreWaits bool
	}{
		{name: "nft 1.8.9", variant: NFT, out: "iptables v1.8.9 (nf_tables)\n", randomFully: true, restoreWaits: true},
		{name: "legacy 1.8.9", variant: Legacy, out: "iptables v1.8.9 (legacy)\n", randomFully: true, restoreWaits: true},
		{name: "1.6.2, before the variants", variant: Legacy, out: "iptables v1.6.2\n", randomFully: true, restoreWaits: true},
		{name: "1.6.1", variant: Legacy, out: "iptables v1.6.1\n"},
		{name: "1.6 in two parts", variant: Legacy, out: "iptables v1.6\n"},
		{name: "too old", variant: Legacy, out: "iptables v1.4.21\n", wantErr: "version 1.4.21, older than 1.6.0"},
		{name: "the wrong variant", variant: Legacy, out: "iptables v1.8.9 (nf_tables)\n", wantErr: "it is the nft variant, not legacy"},
		{name: "unknown mode", variant: NFT, out: "iptables v1.8.9 (bpf)\n", wantErr: `unrecognised mode "bpf"`},
		{name: "garbage", variant: NFT, out: "hello\n", wantErr: `unrecognised version "hello"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExec{}
			name, _ := command(tc.variant, backends.IPv4, toolMain)
			f.replies = map[string]result{name + " --version": {stdout: []byte(tc.out)}}
			r, err := newRunner(tc.variant, backends.IPv4, "", f, []string{binDir(t, allBinaries...)})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), name) {
					t.Fatalf("newRunner = %v, want an error naming %s and saying %q", err, name, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.HasRandomFully() != tc.randomFully || r.restoreWaits != tc.restoreWaits {
				t.Errorf("HasRandomFully, restoreWaits = %v, %v; want %v, %v", r.HasRandomFully(), r.restoreWaits, tc.randomFully, tc.restoreWaits)
			}
		})
	}
}

func TestNewBadArguments(t *testing.T) {
	dir := binDir(t, allBinaries...)
	if _, err := newRunner("iptables", backends.IPv4, "", &fakeExec{}, []string{dir}); err == nil || !strings.Contains(err.Error(), `variant "iptables"`) {
		t.Errorf("bad variant: %v", err)
	}
	if _, err := newRunner(NFT, backends.Family(5), "", &fakeExec{}, []string{dir}); err == nil || !strings.Contains(err.Error(), "family(5)") {
		t.Errorf("bad family: %v", err)
	}
}

func TestCommandLines(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		variant Variant
		family  backends.Family
		replies map[string]result
		do      func(r *Runner) error
		want    []string // command lines, in order
		stdin   string   // of the first
	}{
		{
			name: "restore", variant: NFT, family: backends.IPv4,
			do:    func(r *Runner) error { return r.Restore(ctx, []byte("*nat\nCOMMIT\n")) },
			want:  []string{"iptables-nft-restore --noflush --counters -w 5 -W 100000"},
			stdin: "*nat\nCOMMIT\n",
		},
		{
			name: "restore ipv6 legacy", variant: Legacy, family: backends.IPv6,
			do:    func(r *Runner) error { return r.Restore(ctx, []byte("*filter\nCOMMIT\n")) },
			want:  []string{"ip6tables-legacy-restore --noflush --counters -w 5 -W 100000"},
			stdin: "*filter\nCOMMIT\n",
		},
		{
			name: "save", variant: Legacy, family: backends.IPv4,
			do:   func(r *Runner) error { _, err := r.Save(ctx, "nat"); return err },
			want: []string{"iptables-legacy-save -t nat"},
		},
		{
			name: "ensure a new chain", variant: NFT, family: backends.IPv6,
			do:   func(r *Runner) error { return r.EnsureChain(ctx, "nat", "WASP-SERVICES") },
			want: []string{"ip6tables-nft -w 5 -t nat -N WASP-SERVICES"},
		},
		{
			name: "ensure an existing chain", variant: NFT, family: backends.IPv4,
			replies: map[string]result{"iptables-nft -w 5 -t nat -N C": {code: 1, stderr: []byte("iptables: Chain already exists.\n")}},
			do:      func(r *Runner) error { return r.EnsureChain(ctx, "nat", "C") },
			want:    []string{"iptables-nft -w 5 -t nat -N C", "iptables-nft -w 5 -t nat -S C 1"},
		},
		{
			name: "ensure a missing rule: check, then prepend", variant: Legacy, family: backends.IPv4,
			replies: map[string]result{"iptables-legacy -w 5 -t nat -C OUTPUT -m comment --comment wasp services -j W": {code: 1}},
			do: func(r *Runner) error {
				existed, err := r.EnsureRule(ctx, "nat", "OUTPUT", "-m", "comment", "--comment", "wasp services", "-j", "W")
				if existed {
					t.Error("existed = true for a missing rule")
				}
				return err
			},
			want: []string{
				"iptables-legacy -w 5 -t nat -C OUTPUT -m comment --comment wasp services -j W",
				"iptables-legacy -w 5 -t nat -I OUTPUT -m comment --comment wasp services -j W",
			},
		},
		{
			name: "ensure an existing rule: check only", variant: NFT, family: backends.IPv4,
			do: func(r *Runner) error {
				existed, err := r.EnsureRule(ctx, "filter", "INPUT", "-j", "W")
				if !existed {
					t.Error("existed = false for an existing rule")
				}
				return err
			},
			want: []string{"iptables-nft -w 5 -t filter -C INPUT -j W"},
		},
		{
			name: "delete a rule", variant: NFT, family: backends.IPv4,
			do:   func(r *Runner) error { return r.DeleteRule(ctx, "nat", "OUTPUT", "-j", "W") },
			want: []string{"iptables-nft -w 5 -t nat -D OUTPUT -j W"},
		},
		{
			name: "chain exists", variant: Legacy, family: backends.IPv6,
			do: func(r *Runner) error {
				ok, err := r.ChainExists(ctx, "mangle", "KUBE-IPTABLES-HINT")
				if !ok {
					t.Error("ChainExists = false after exit status 0")
				}
				return err
			},
			want: []string{"ip6tables-legacy -w 5 -t mangle -S KUBE-IPTABLES-HINT 1"},
		},
		{
			name: "chain missing", variant: NFT, family: backends.IPv4,
			replies: map[string]result{"iptables-nft -w 5 -t mangle -S X 1": {code: 1, stderr: []byte("iptables v1.8.9 (nf_tables): chain `X' in table `mangle' is incompatible, use 'nft' tool.\n")}},
			do: func(r *Runner) error {
				ok, err := r.ChainExists(ctx, "mangle", "X")
				if ok {
					t.Error("ChainExists = true after exit status 1")
				}
				return err
			},
			want: []string{"iptables-nft -w 5 -t mangle -S X 1"},
		},
		{
			name: "delete a chain: flush, then delete", variant: NFT, family: backends.IPv4,
			do:   func(r *Runner) error { return r.DeleteChain(ctx, "nat", "WASP-SERVICES") },
			want: []string{"iptables-nft -w 5 -t nat -F WASP-SERVICES", "iptables-nft -w 5 -t nat -X WASP-SERVICES"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, f := fakeRunner(t, tc.variant, tc.family)
			f.replies = tc.replies
			if err := tc.do(r); err != nil {
				t.Fatal(err)
			}
			calls := f.take()
			var got []string
			for _, c := range calls {
				got = append(got, c.String())
				if c.netns != "/run/netns/t" {
					t.Errorf("%s ran in namespace %q, want /run/netns/t", c, c.netns)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ran\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tc.want, "\n\t"))
			}
			if len(calls) > 0 && (calls[0].stdin != tc.stdin || calls[0].input != (tc.stdin != "")) {
				t.Errorf("stdin %q (given: %v), want %q", calls[0].stdin, calls[0].input, tc.stdin)
			}
		})
	}
}

// Messages of iptables 1.8.9, as its binaries wrote them.
const (
	msgBadRule          = "iptables: Bad rule (does a matching rule exist in that chain?).\n"
	msgNoChain          = "iptables: No chain/target/match by that name.\n"
	msgNFTNoTargetChain = "iptables v1.8.9 (nf_tables): Chain 'GONE' does not exist\nTry `iptables -h' or 'iptables --help' for more information.\n"
	msgLegacyNoTarget   = "iptables v1.8.9 (legacy): Couldn't load target `GONE':No such file or directory\n\nTry `iptables -h' or 'iptables --help' for more information.\n"
	msgNoMatch          = "iptables v1.8.9 (nf_tables): Couldn't load match `nosuch':No such file or directory\n\nTry `iptables -h' or 'iptables --help' for more information.\n"
	msgNFTBusy          = "iptables v1.8.9 (nf_tables):  CHAIN_DEL failed (Device or resource busy): chain C\n"
	msgLegacyBusy       = "iptables: Too many links.\n"
)

func TestMissingIsNoError(t *testing.T) {
	ctx := context.Background()
	const (
		del   = "iptables-nft -w 5 -t nat -D OUTPUT -j GONE"
		check = "iptables-nft -w 5 -t nat -C OUTPUT -j GONE"
		gone  = "iptables-nft -w 5 -t nat -S GONE 1"
	)
	for _, tc := range []struct {
		name    string
		replies map[string]result
		do      func(r *Runner) error
		wantErr string // "" for none
	}{
		{
			name:    "delete a rule that is not there",
			replies: map[string]result{del: {code: 1, stderr: []byte(msgBadRule)}, check: {code: 1, stderr: []byte(msgBadRule)}},
			do:      func(r *Runner) error { return r.DeleteRule(ctx, "nat", "OUTPUT", "-j", "GONE") },
		},
		{
			name: "delete a rule whose target chain is gone (nft)",
			replies: map[string]result{
				del: {code: 2, stderr: []byte(msgNFTNoTargetChain)}, check: {code: 2, stderr: []byte(msgNFTNoTargetChain)},
				gone: {code: 1, stderr: []byte(msgNoChain)},
			},
			do: func(r *Runner) error { return r.DeleteRule(ctx, "nat", "OUTPUT", "-j", "GONE") },
		},
		{
			name: "delete a rule whose target chain is gone (legacy)",
			replies: map[string]result{
				del: {code: 2, stderr: []byte(msgLegacyNoTarget)}, check: {code: 2, stderr: []byte(msgLegacyNoTarget)},
				gone: {code: 1, stderr: []byte(msgNoChain)},
			},
			do: func(r *Runner) error { return r.DeleteRule(ctx, "nat", "OUTPUT", "-j", "GONE") },
		},
		{
			name: "delete a rule with an unknown match",
			replies: map[string]result{
				"iptables-nft -w 5 -t nat -D OUTPUT -m nosuch -j GONE": {code: 2, stderr: []byte(msgNoMatch)},
				"iptables-nft -w 5 -t nat -C OUTPUT -m nosuch -j GONE": {code: 2, stderr: []byte(msgNoMatch)},
				gone: {code: 1},
			},
			do:      func(r *Runner) error { return r.DeleteRule(ctx, "nat", "OUTPUT", "-m", "nosuch", "-j", "GONE") },
			wantErr: "iptables-nft -w 5 -t nat -D OUTPUT -m nosuch -j GONE: exit status 2: iptables v1.8.9 (nf_tables): Couldn't load match `nosuch':No such file or directory",
		},
		{
			name: "delete a rule the kernel keeps",
			replies: map[string]result{
				del: {code: 4, stderr: []byte("iptables v1.8.9 (nf_tables): RULE_DELETE failed (Operation not permitted)\n")},
			},
			do:      func(r *Runner) error { return r.DeleteRule(ctx, "nat", "OUTPUT", "-j", "GONE") },
			wantErr: "exit status 4: iptables v1.8.9 (nf_tables): RULE_DELETE failed (Operation not permitted)",
		},
		{
			name: "delete a missing chain",
			replies: map[string]result{
				"iptables-nft -w 5 -t nat -F GONE": {code: 1, stderr: []byte(msgNoChain)},
				gone:                               {code: 1},
			},
			do: func(r *Runner) error { return r.DeleteChain(ctx, "nat", "GONE") },
		},
		{
			name:    "delete a chain rules jump to (nft)",
			replies: map[string]result{"iptables-nft -w 5 -t nat -X C": {code: 4, stderr: []byte(msgNFTBusy)}},
			do:      func(r *Runner) error { return r.DeleteChain(ctx, "nat", "C") },
			wantErr: "iptables-nft -w 5 -t nat -X C: exit status 4: iptables v1.8.9 (nf_tables):  CHAIN_DEL failed (Device or resource busy): chain C",
		},
		{
			name:    "delete a chain rules jump to (legacy)",
			replies: map[string]result{"iptables-nft -w 5 -t nat -X C": {code: 1, stderr: []byte(msgLegacyBusy)}},
			do:      func(r *Runner) error { return r.DeleteChain(ctx, "nat", "C") },
			wantErr: "exit status 1: iptables: Too many links.",
		},
		{
			name: "ensure a chain that cannot be made",
			replies: map[string]result{
				"iptables-nft -w 5 -t nat -N C":   {code: 1, stderr: []byte("iptables: Invalid argument.\n")},
				"iptables-nft -w 5 -t nat -S C 1": {code: 1},
			},
			do:      func(r *Runner) error { return r.EnsureChain(ctx, "nat", "C") },
			wantErr: "iptables-nft -w 5 -t nat -N C: exit status 1: iptables: Invalid argument.",
		},
		{
			name: "ensure a rule into a missing chain",
			replies: map[string]result{
				"iptables-nft -w 5 -t nat -C NOPE -j ACCEPT": {code: 1, stderr: []byte(msgBadRule)},
				"iptables-nft -w 5 -t nat -I NOPE -j ACCEPT": {code: 1, stderr: []byte(msgNoChain)},
			},
			do: func(r *Runner) error {
				_, err := r.EnsureRule(ctx, "nat", "NOPE", "-j", "ACCEPT")
				return err
			},
			wantErr: "iptables-nft -w 5 -t nat -I NOPE -j ACCEPT: exit status 1: iptables: No chain/target/match by that name.",
		},
		{
			name:    "ensure a rule with an unknown match",
			replies: map[string]result{"iptables-nft -w 5 -t nat -C OUTPUT -m nosuch": {code: 2, stderr: []byte(msgNoMatch)}},
			do: func(r *Runner) error {
				_, err := r.EnsureRule(ctx, "nat", "OUTPUT", "-m", "nosuch")
				return err
			},
			wantErr: "-C OUTPUT -m nosuch: exit status 2: iptables v1.8.9 (nf_tables): Couldn't load match `nosuch':No such file or directory",
		},
		{
			name:    "chain exists, inconclusive",
			replies: map[string]result{"iptables-nft -w 5 -t nat -S C 1": {code: 4, stderr: []byte("Another app is currently holding the xtables lock. Stopped waiting after 5s.\n")}},
			do: func(r *Runner) error {
				_, err := r.ChainExists(ctx, "nat", "C")
				return err
			},
			wantErr: "exit status 4: Another app is currently holding the xtables lock",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, f := fakeRunner(t, NFT, backends.IPv4)
			f.replies = tc.replies
			err := tc.do(r)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "Try `") {
				t.Errorf("err %q keeps the usage hint", err)
			}
		})
	}
}
