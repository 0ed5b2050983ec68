package nodesetup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// kernelOK stands for a kernel where every probe succeeds.
func kernelOK() []probe {
	return []probe{fixedProbe(probeConntrackNL, "", Supported, "")}
}

func fixedProbe(name, after string, o Outcome, reason string) probe {
	return probe{Name: name, Checks: "test", After: after, Run: func(context.Context) (Outcome, string) { return o, reason }}
}

// says fails t for each of want that text, the named output, lacks.
func says(t *testing.T, name, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not say %q:\n%s", name, w, text)
		}
	}
}

func runFake(t *testing.T, c Config, f *fakeFiles, probes []probe) (Report, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	return run(ctx, &c, env{files: f, probes: probes})
}

// TestSettings checks which settings Run writes, and to what, from the
// kernel's defaults of newFakeFiles (4 CPUs, nf_conntrack_max 65536,
// hashsize 16384).
func TestSettings(t *testing.T) {
	const (
		maxPath  = "/proc/sys/net/netfilter/nf_conntrack_max"
		hashPath = "/sys/module/nf_conntrack/parameters/hashsize"
		nf       = "/proc/sys/net/netfilter/"
	)
	tests := []struct {
		name   string
		config Config
		files  map[string]string // overrides of the defaults
		want   []string          // the writes, sorted
	}{
		{name: "zero config writes nothing"},
		{
			name:   "kube-proxy defaults on 4 CPUs: Min wins",
			config: Config{Conntrack: Conntrack{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour}},
			want: []string{
				nf + "nf_conntrack_max=131072",
				nf + "nf_conntrack_tcp_timeout_close_wait=3600",
				nf + "nf_conntrack_tcp_timeout_established=86400",
				hashPath + "=32768",
			},
		},
		{
			name:   "per core wins on 16 CPUs",
			config: Config{Conntrack: Conntrack{MaxPerCore: 32768, Min: 131072}},
			files:  map[string]string{cpuOnlinePath: "0-7,16-23"},
			want:   []string{maxPath + "=524288", hashPath + "=131072"},
		},
		{
			name:   "MaxPerCore 0 leaves the table alone whatever Min",
			config: Config{Conntrack: Conntrack{Min: 1 << 20}},
		},
		{
			name:   "larger limits are never lowered",
			config: Config{Conntrack: Conntrack{MaxPerCore: 32768, Min: 131072}},
			files:  map[string]string{maxPath: "1048576", hashPath: "262144"},
		},
		{
			name:   "a small hash table is raised even when the limit is large enough",
			config: Config{Conntrack: Conntrack{MaxPerCore: 32768, Min: 131072}},
			files:  map[string]string{maxPath: "1048576"},
			want:   []string{hashPath + "=32768"},
		},
		{
			name:   "values already set are not written",
			config: Config{Conntrack: Conntrack{TCPEstablishedTimeout: 5 * 24 * time.Hour, UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2 * time.Minute}},
		},
		{
			name:   "timeouts in whole seconds, truncated",
			config: Config{Conntrack: Conntrack{TCPCloseWaitTimeout: 90*time.Second + 999*time.Millisecond, UDPTimeout: time.Minute, UDPStreamTimeout: 3 * time.Minute}},
			want: []string{
				nf + "nf_conntrack_tcp_timeout_close_wait=90",
				nf + "nf_conntrack_udp_timeout=60",
				nf + "nf_conntrack_udp_timeout_stream=180",
			},
		},
		{
			name:   "be_liberal is written when true",
			config: Config{Conntrack: Conntrack{TCPBeLiberal: true}},
			want:   []string{nf + "nf_conntrack_tcp_be_liberal=1"},
		},
		{
			name:  "be_liberal false never writes 0",
			files: map[string]string{nf + "nf_conntrack_tcp_be_liberal": "1"},
		},
		{
			name:   "route_localnet only when asked",
			config: Config{RouteLocalnet: true},
			want:   []string{"/proc/sys/net/ipv4/conf/all/route_localnet=1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeFiles(tt.files)
			r, err := runFake(t, tt.config, f, kernelOK())
			if err != nil {
				t.Fatal(err)
			}
			if got := f.written(); !slices.Equal(got, tt.want) {
				t.Errorf("writes\n got %q\nwant %q", got, tt.want)
			}
			for _, s := range r.Settings {
				if got := f.values[s.Path]; got != fmt.Sprint(s.Value) && s.Action == Written {
					t.Errorf("%s: reported written %d, file holds %q", s.Name, s.Value, got)
				}
				if s.Action == Failed {
					t.Errorf("%s: failed", s.Name)
				}
			}
			// Run is idempotent: a second run writes nothing.
			f.writes = nil
			r, err = runFake(t, tt.config, f, kernelOK())
			if err != nil {
				t.Fatal(err)
			}
			if len(f.writes) != 0 {
				t.Errorf("second run wrote %q", f.writes)
			}
			for _, s := range r.Settings {
				if s.Action != Unchanged {
					t.Errorf("second run: %s %s", s.Name, s.Action)
				}
			}
		})
	}
}

func TestConntrackMax(t *testing.T) {
	tests := []struct {
		name            string
		perCore, min, n int
		want            int
	}{
		{"unchanged", 0, 131072, 8, 0},
		{"min", 32768, 131072, 2, 131072},
		{"scaled", 32768, 131072, 8, 262144},
		{"scaled without min", 1000, 0, 3, 3000},
		{"saturates", 1 << 30, 0, 64, maxConntrackMax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := conntrackMax(&Conntrack{MaxPerCore: tt.perCore, Min: tt.min}, tt.n); got != tt.want {
				t.Errorf("conntrackMax(%d, %d, %d CPUs) = %d, want %d", tt.perCore, tt.min, tt.n, got, tt.want)
			}
		})
	}
}

func TestCPUs(t *testing.T) {
	tests := []struct {
		name, online string
		want         int
	}{
		{"range", "0-3", 4},
		{"ranges and singles", "0-3,8,10-11\n", 7},
		{"one", "0", 1},
		{"garbage falls back", "x", runtime.NumCPU()},
		{"reversed falls back", "3-1", runtime.NumCPU()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := onlineCPUs(newFakeFiles(map[string]string{cpuOnlinePath: tt.online})); got != tt.want {
				t.Errorf("%q: %d CPUs, want %d", tt.online, got, tt.want)
			}
		})
	}
	f := newFakeFiles(nil)
	delete(f.values, cpuOnlinePath)
	if got := onlineCPUs(f); got != runtime.NumCPU() {
		t.Errorf("no sysfs list: %d CPUs, want the runtime's %d", got, runtime.NumCPU())
	}
}

// TestErrors: every failure is reported, naming the setting and value,
// and does not stop the other settings.
func TestErrors(t *testing.T) {
	all := Config{Conntrack: Conntrack{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPBeLiberal: true}}
	tests := []struct {
		name    string
		config  Config
		files   func(*fakeFiles)
		wantErr []string // substrings of the error, each
		is      []error
		failed  []string // settings reported Failed
		written []string // settings still written
	}{
		{
			name:    "read-only sysfs",
			config:  all,
			files:   func(f *fakeFiles) { f.readOnly(settingHashsize.path) },
			wantErr: []string{"nf_conntrack.hashsize=32768", "read-only file system", "/sys is writable"},
			is:      []error{ErrReadOnly, syscall.EROFS},
			failed:  []string{settingHashsize.name},
			written: []string{settingConntrackMax.name, settingTCPEstablished.name, settingTCPBeLiberal.name},
		},
		{
			name:   "read-only procfs",
			config: all,
			files: func(f *fakeFiles) {
				f.readOnly(settingConntrackMax.path, settingTCPEstablished.path, settingTCPBeLiberal.path)
			},
			wantErr: []string{"net.netfilter.nf_conntrack_max=131072", "net.netfilter.nf_conntrack_tcp_timeout_established=86400",
				"net.netfilter.nf_conntrack_tcp_be_liberal=1", "/proc/sys is writable"},
			is:      []error{ErrReadOnly},
			failed:  []string{settingConntrackMax.name, settingTCPEstablished.name, settingTCPBeLiberal.name},
			written: []string{settingHashsize.name},
		},
		{
			name:    "global setting from another network namespace",
			config:  all,
			files:   func(f *fakeFiles) { f.refuse[settingConntrackMax.path] = syscall.EACCES },
			wantErr: []string{"net.netfilter.nf_conntrack_max=131072", "permission denied", "initial network namespace"},
			failed:  []string{settingConntrackMax.name},
			written: []string{settingHashsize.name, settingTCPEstablished.name, settingTCPBeLiberal.name},
		},
		{
			name:   "nf_conntrack not loaded",
			config: Config{Conntrack: Conntrack{UDPTimeout: time.Minute}},
			files: func(f *fakeFiles) {
				for p := range f.values {
					if strings.HasPrefix(p, "/proc/sys/net/netfilter/") {
						delete(f.values, p)
					}
				}
			},
			wantErr: []string{"net.netfilter.nf_conntrack_udp_timeout=60", "nf_conntrack module loaded", "probe nf_conntrack: not supported"},
			is:      []error{ErrNotSupported},
			failed:  []string{settingUDPTimeout.name},
		},
		{
			name:    "garbage in a file",
			config:  Config{Conntrack: Conntrack{TCPBeLiberal: true}},
			files:   func(f *fakeFiles) { f.values[settingTCPBeLiberal.path] = "yes" },
			wantErr: []string{`net.netfilter.nf_conntrack_tcp_be_liberal=1: read /proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal: "yes" is not a number`},
			failed:  []string{settingTCPBeLiberal.name},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeFiles(nil)
			tt.files(f)
			r, err := runFake(t, tt.config, f, kernelOK())
			if err == nil {
				t.Fatal("no error")
			}
			says(t, "error", err.Error(), tt.wantErr...)
			for _, target := range tt.is {
				if !errors.Is(err, target) {
					t.Errorf("error is not %v: %v", target, err)
				}
			}
			for _, s := range r.Settings {
				switch {
				case slices.Contains(tt.failed, s.Name) && s.Action != Failed:
					t.Errorf("%s: %s, want failed", s.Name, s.Action)
				case slices.Contains(tt.written, s.Name) && s.Action != Written:
					t.Errorf("%s: %s, want written", s.Name, s.Action)
				}
			}
		})
	}
}

func TestInvalidConfig(t *testing.T) {
	f := newFakeFiles(nil)
	c := Config{RouteLocalnet: true, Conntrack: Conntrack{
		MaxPerCore: -1, Min: -2,
		TCPEstablishedTimeout: 500 * time.Millisecond, TCPCloseWaitTimeout: -time.Second,
		UDPTimeout: time.Minute, UDPStreamTimeout: 1 << 62,
	}}
	r, err := runFake(t, c, f, kernelOK())
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %v, want ErrInvalidConfig", err)
	}
	says(t, "error", err.Error(),
		"conntrack.maxPerCore: -1 is negative",
		"conntrack.min: -2 is negative",
		"conntrack.tcpEstablishedTimeout: 500ms is under a second",
		"conntrack.tcpCloseWaitTimeout: -1s is negative",
		"conntrack.udpStreamTimeout: 1281023h53m38.427387904s is over 2147483647 seconds")
	if len(f.writes) != 0 || len(r.Settings) != 0 || len(r.Probes) != 0 {
		t.Errorf("an invalid config did something: writes %q, report %+v", f.writes, r)
	}
}

func TestProbes(t *testing.T) {
	tests := []struct {
		name    string
		probes  []probe
		want    []Outcome // then nf_conntrack's
		wantErr []string
	}{
		{
			name:   "supported",
			probes: []probe{fixedProbe("a", "", Supported, ""), fixedProbe("b", "a", Supported, "")},
			want:   []Outcome{Supported, Supported, Supported},
		},
		{
			name: "a failed prerequisite makes the others inconclusive, not errors",
			probes: []probe{
				fixedProbe("a", "", NotSupported, "EINVAL"),
				fixedProbe("b", "a", Supported, ""),
				fixedProbe("c", "", Inconclusive, "EPERM"),
				fixedProbe("d", "c", Supported, ""),
			},
			want:    []Outcome{NotSupported, Inconclusive, Inconclusive, Inconclusive, Supported},
			wantErr: []string{"probe a: not supported by this kernel: EINVAL"},
		},
		{
			name:    "every failure is an error",
			probes:  []probe{fixedProbe("a", "", NotSupported, "x"), fixedProbe("b", "", NotSupported, "y")},
			want:    []Outcome{NotSupported, NotSupported, Supported},
			wantErr: []string{"probe a: not supported by this kernel: x", "probe b: not supported by this kernel: y"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := runFake(t, Config{}, newFakeFiles(nil), tt.probes)
			var got []Outcome
			for _, p := range r.Probes {
				got = append(got, p.Outcome)
				if (p.Outcome == Supported) != (p.Reason == "") {
					t.Errorf("%s: %s with reason %q", p.Name, p.Outcome, p.Reason)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("outcomes %v, want %v", got, tt.want)
			}
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), s) || !errors.Is(err, ErrNotSupported) {
					t.Errorf("error %v, want one wrapping ErrNotSupported with %q", err, s)
				}
			}
		})
	}
}

func TestReportString(t *testing.T) {
	f := newFakeFiles(nil).readOnly(settingHashsize.path)
	r, _ := runFake(t, Config{Conntrack: Conntrack{MaxPerCore: 32768, UDPTimeout: 30 * time.Second}}, f,
		[]probe{fixedProbe("nftables", "", Supported, ""), fixedProbe("nftables-numgen", "", NotSupported, "no numgen")})
	says(t, "report", r.String(),
		"net.netfilter.nf_conntrack_max          131072  65536   written",
		"nf_conntrack.hashsize                   32768   16384   failed",
		"net.netfilter.nf_conntrack_udp_timeout  30      30      unchanged",
		"(nf_conntrack_max sized for 4 CPUs)",
		"nftables-numgen  not supported",
		"no numgen")
}

// TestOSFiles: paths map to the configured mounts; a write is the value
// and a newline, a read is trimmed. No root needed.
func TestOSFiles(t *testing.T) {
	proc, sys := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(proc, "sys/net/netfilter/nf_conntrack_max"), filepath.Join(sys, "module/nf_conntrack/parameters/hashsize")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := newOSFiles(&Config{ProcRoot: proc, SysRoot: sys})
	for _, s := range []setting{settingConntrackMax, settingHashsize} {
		if err := f.write(s.path, "262144"); err != nil {
			t.Fatal(err)
		}
		if v, err := f.read(s.path); err != nil || v != "262144" {
			t.Errorf("%s: read %q, %v", s.name, v, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(sys, "module/nf_conntrack/parameters/hashsize"))
	if err != nil || string(b) != "262144\n" {
		t.Errorf("hashsize file holds %q, %v", b, err)
	}
	if err := f.write(settingUDPTimeout.path, "1"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("writing a missing setting: %v, want not exist", err)
	}
}

// TestDataplaneProbes: the dataplane's probes come first in the report,
// before the conntrack ones, and one NotSupported fails Run naming it;
// without Config.Dataplane no dataplane is probed.
func TestDataplaneProbes(t *testing.T) {
	iptables := func(o Outcome, reason string) func(context.Context) []ProbeResult {
		return func(context.Context) []ProbeResult {
			return []ProbeResult{{Name: "iptables", Checks: "test", Outcome: o, Reason: reason}}
		}
	}
	r, err := runFake(t, Config{Dataplane: iptables(Supported, "")}, newFakeFiles(nil), []probe{fixedProbe(probeConntrackNL, "", Supported, "")})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range r.Probes {
		names = append(names, p.Name)
	}
	if want := []string{"iptables", probeConntrackNL, probeConntrackMod}; !slices.Equal(names, want) {
		t.Errorf("probes %v, want %v", names, want)
	}

	_, err = runFake(t, Config{Dataplane: iptables(NotSupported, "install iptables")}, newFakeFiles(nil), nil)
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "probe iptables") || !strings.Contains(err.Error(), "install iptables") {
		t.Errorf("got %v, want the dataplane probe's NotSupported", err)
	}

	r, err = runFake(t, Config{}, newFakeFiles(nil), nil)
	if err != nil || len(r.Probes) != 1 || r.Probes[0].Name != probeConntrackMod {
		t.Errorf("no dataplane: probes %+v, %v; want the nf_conntrack one alone", r.Probes, err)
	}
}
