package nodesetup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"k8s.io/klog/v2"

	"github.com/wasp-proxy/wasp/backends"
)

// Report is what Run found and did.
type Report struct {
	// CPUs is the CPU count nf_conntrack_max was sized by; 0 when it was
	// left unchanged.
	CPUs int `json:"cpus,omitempty"`
	// Settings holds one entry per setting Run was asked to write, in
	// order.
	Settings []Setting `json:"settings"`
	// Probes holds one entry per kernel probe, in order.
	Probes []ProbeResult `json:"probes"`
}

// env is what Run touches outside the process; unit tests replace it.
type env struct {
	files  files
	probes []probe // the conntrack probes; the nf_conntrack one is added
}

// Run does the node's one-time privileged setup: it probes the kernel
// for what wasp's dataplane uses (c.Dataplane's probes, then conntrack's),
// then writes the settings c asks for.
// It needs root (CAP_NET_ADMIN for the probes; CAP_SYS_ADMIN over the
// network namespace and writable /proc/sys and /sys for the settings);
// afterwards wasp run needs CAP_NET_ADMIN only. It is safe to run again:
// a setting that already has its value is not written.
//
// The error joins every failure: a Config it refuses (ErrInvalidConfig,
// then nothing is done), each setting that could not be written (naming
// it and its value; ErrReadOnly for a read-only mount), and each probe
// whose outcome is NotSupported (ErrNotSupported). Inconclusive probes
// are logged and reported, not errors. The Report is complete either
// way.
func Run(ctx context.Context, c Config) (Report, error) {
	return run(ctx, &c, env{files: newOSFiles(&c), probes: conntrackProbes(c.NetNS)})
}

// Probe runs the probes every mode needs, conntrack's, in the network
// namespace at netns ("" for the current one) and changes nothing that
// outlives it. Tests use it to skip with a reason. A mode's own probes
// belong to its backend (nftables.Probes), which Config.Dataplane runs.
func Probe(ctx context.Context, netns string) []ProbeResult {
	return backends.RunProbes(ctx, append(conntrackProbes(netns), moduleProbe(newOSFiles(&Config{NetNS: netns}))))
}

func run(ctx context.Context, c *Config, e env) (Report, error) {
	if err := c.validate(); err != nil {
		return Report{}, err
	}
	logger := klog.FromContext(ctx)
	var (
		r    Report
		errs []error
	)
	// The probes go first, the dataplane's first of all: programming NAT
	// makes the kernel load nf_conntrack, whose sysctls the settings
	// write.
	if c.Dataplane != nil {
		r.Probes = c.Dataplane(ctx)
	}
	r.Probes = append(r.Probes, backends.RunProbes(ctx, append(e.probes[:len(e.probes):len(e.probes)], moduleProbe(e.files)))...)
	for _, p := range r.Probes {
		logger.Info("Kernel probe", "probe", p.Name, "outcome", string(p.Outcome), "reason", p.Reason)
		if p.Outcome == NotSupported {
			errs = append(errs, fmt.Errorf("probe %s: %w: %s", p.Name, ErrNotSupported, p.Reason))
		}
	}
	if c.Conntrack.MaxPerCore > 0 {
		r.CPUs = onlineCPUs(e.files)
	}
	settings, err := apply(ctx, e.files, plan(c, r.CPUs))
	r.Settings = settings
	if err != nil {
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// String formats r as two tables, for people.
func (r Report) String() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if len(r.Settings) == 0 {
		fmt.Fprintln(w, "settings: none asked for")
	} else {
		fmt.Fprintln(w, "SETTING\tVALUE\tBEFORE\tACTION")
		for _, s := range r.Settings {
			before := s.Before
			if before == "" {
				before = "?"
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", s.Name, s.Value, before, s.Action)
		}
	}
	if r.CPUs > 0 {
		fmt.Fprintf(w, "(nf_conntrack_max sized for %d CPUs)\n", r.CPUs)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "PROBE\tOUTCOME\tCHECKS\tREASON")
	for _, p := range r.Probes {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Name, p.Outcome, p.Checks, p.Reason)
	}
	w.Flush()
	return b.String()
}
