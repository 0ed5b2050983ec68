//go:build linux

package framework

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/wasp-proxy/wasp/backends/iptables"
	"github.com/wasp-proxy/wasp/internal/netlab"
)

// Dataplane is one of wasp's dataplanes as the end-to-end tests run it: a
// proxy mode, and for iptables the variant of the iptables binaries the
// node uses.
type Dataplane struct {
	// Name is how tests and logs call it: "nftables", "iptables-nft" or
	// "iptables-legacy".
	Name string
	// Mode is wasp's --proxy-mode.
	Mode string
	// Variant is the iptables variant ("nft" or "legacy") the node is
	// made to use, the way kubelet marks it: an empty KUBE-IPTABLES-HINT
	// chain in that variant's mangle table. "" for nftables.
	Variant string
}

// The dataplanes, in the order tests run them.
var (
	NFTablesDataplane       = Dataplane{Name: "nftables", Mode: "nftables"}
	IPTablesNFTDataplane    = Dataplane{Name: "iptables-nft", Mode: "iptables", Variant: "nft"}
	IPTablesLegacyDataplane = Dataplane{Name: "iptables-legacy", Mode: "iptables", Variant: "legacy"}
)

// Dataplanes are the dataplanes an end-to-end scenario runs against: all
// three, or those WASP_E2E_DATAPLANES names (comma-separated, e.g.
// "nftables,iptables-legacy").
func Dataplanes(t testing.TB) []Dataplane {
	t.Helper()
	all := []Dataplane{NFTablesDataplane, IPTablesNFTDataplane, IPTablesLegacyDataplane}
	s := os.Getenv("WASP_E2E_DATAPLANES")
	if s == "" {
		return all
	}
	var out []Dataplane
	for _, name := range strings.Split(s, ",") {
		i := slices.IndexFunc(all, func(d Dataplane) bool { return d.Name == strings.TrimSpace(name) })
		if i < 0 {
			t.Fatalf("WASP_E2E_DATAPLANES: unknown dataplane %q (want nftables, iptables-nft, iptables-legacy)", name)
		}
		out = append(out, all[i])
	}
	return out
}

// Args are wasp's flags for d.
func (d Dataplane) Args() []string { return []string{"--proxy-mode", d.Mode} }

// IPTables reports whether d is an iptables dataplane.
func (d Dataplane) IPTables() bool { return d.Mode == "iptables" }

// binary returns the iptables binary of d's variant for the family, e.g.
// "ip6tables-legacy-save" for (6, "-save").
func (d Dataplane) binary(family int, suffix string) string {
	name := "iptables"
	if family == 6 {
		name = "ip6tables"
	}
	return name + "-" + d.Variant + suffix
}

// UseDataplane makes d the dataplane of every wasp the environment starts
// from now on (DefaultArgs carries its mode) and of ReadRuleset. For
// iptables it marks the proxy node as using d's variant, with kubelet's
// hint chain, and removes the other variant's. It skips t, with the
// reason, when d's binaries are missing. The previous dataplane's wasp
// must have been stopped; whatever it left is removed (wasp cleanup), so
// that d starts on a clean node.
func (e *Env) UseDataplane(t testing.TB, d Dataplane) {
	t.Helper()
	if e.WaspBin != "" {
		if out, err := e.RunWasp(context.Background(), "cleanup"); err != nil {
			t.Fatalf("dataplane %s: wasp cleanup before it: %v\n%s", d.Name, err, out)
		}
	}
	if d.IPTables() {
		for _, bin := range []string{d.binary(4, ""), d.binary(4, "-restore"), d.binary(4, "-save"), d.binary(6, "-restore")} {
			if _, err := exec.LookPath(bin); err != nil {
				t.Skipf("dataplane %s: %s is not installed (Debian: apt-get install iptables)", d.Name, bin)
			}
		}
		for _, v := range []string{"nft", "legacy"} {
			bin := "iptables-" + v
			if _, err := exec.LookPath(bin); err != nil {
				continue
			}
			args := []string{"-w", "-t", "mangle", "-X", "KUBE-IPTABLES-HINT"}
			if v == d.Variant {
				args = []string{"-w", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT"}
			}
			out, err := e.ProxyNS().Command(context.Background(), bin, args...).CombinedOutput()
			if err != nil && v == d.Variant && !strings.Contains(string(out), "exists") {
				t.Fatalf("dataplane %s: %s %s: %v\n%s", d.Name, bin, strings.Join(args, " "), err, out)
			}
		}
	}
	e.dataplane = d
}

// Dataplane is the environment's current dataplane (NFTablesDataplane unless
// UseDataplane chose another).
func (e *Env) Dataplane() Dataplane {
	if e.dataplane.Name == "" {
		return NFTablesDataplane
	}
	return e.dataplane
}

// ReadRuleset reads what wasp programmed in the proxy node for the
// current dataplane: its nftables tables, or its iptables chains (every
// chain named WASP-*, and the rules of the built-in chains that jump to
// them) of both families.
func (e *Env) ReadRuleset() (*Ruleset, error) {
	d := e.Dataplane()
	if !d.IPTables() {
		return ReadRuleset(e.ProxyNS())
	}
	return ReadIPTables(e.ProxyNS(), d)
}

// ReadIPTables reads wasp's iptables chains of both families in ns with
// d's variant's iptables-save, and its hairpin ipsets over netlink.
// Tables counts the (family, table) pairs holding a WASP- chain; Chains
// and Rules count wasp's chains and their rules plus the jumps to them;
// Sets and Elements the hairpin sets and their entries; Lines is the
// canonical listing without counters, sorted.
func ReadIPTables(ns *netlab.NS, d Dataplane) (*Ruleset, error) {
	r := &Ruleset{}
	if err := readHairpinSets(r, ns); err != nil {
		return nil, err
	}
	for _, family := range []int{4, 6} {
		bin := d.binary(family, "-save")
		var stderr bytes.Buffer
		cmd := ns.Command(context.Background(), bin)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s in %s: %v: %s", bin, ns.Name(), err, stderr.String())
		}
		parseIPTablesSave(r, family, out)
	}
	sort.Strings(r.Lines)
	return r, nil
}

// parseIPTablesSave adds wasp's part of one family's iptables-save output
// to r.
func parseIPTablesSave(r *Ruleset, family int, out []byte) {
	var table string
	counted := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		prefix := fmt.Sprintf("ipv%d %s ", family, table)
		switch {
		case strings.HasPrefix(line, "*"):
			table, counted = line[1:], false
		case strings.HasPrefix(line, ":WASP-"):
			if !counted {
				r.Tables, counted = r.Tables+1, true
			}
			r.Chains++
			r.Lines = append(r.Lines, prefix+"chain "+strings.Fields(line[1:])[0])
		case strings.HasPrefix(line, "-A "):
			f := strings.Fields(line)
			if strings.HasPrefix(f[1], "WASP-") || strings.Contains(line, " -j WASP-") || strings.Contains(line, " -g WASP-") {
				r.Rules++
				r.Lines = append(r.Lines, prefix+line)
			}
		}
	}
}

// readHairpinSets adds the iptables backend's hairpin sets in ns, those
// that exist, to r: "ipset NAME" and "ipset NAME ENTRY" lines.
func readHairpinSets(r *Ruleset, ns *netlab.NS) error {
	for _, name := range []string{iptables.SetHairpin4, iptables.SetHairpin6} {
		var res *netlink.IPSetResult
		err := ns.Do(func() (err error) { res, err = netlink.IpsetList(name); return err })
		if errors.Is(err, syscall.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("list ipset %s in %s: %w", name, ns.Name(), err)
		}
		r.Sets++
		r.Lines = append(r.Lines, "ipset "+name)
		for _, e := range res.Entries {
			r.Elements++
			port, proto := uint16(0), uint8(0)
			if e.Port != nil {
				port = *e.Port
			}
			if e.Protocol != nil {
				proto = *e.Protocol
			}
			r.Lines = append(r.Lines, fmt.Sprintf("ipset %s %s,%d:%d,%s", name, e.IP, proto, port, e.IP2))
		}
	}
	return nil
}
