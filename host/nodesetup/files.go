package nodesetup

import (
	"os"
	"path/filepath"
	"strings"
)

// files is the seam between Run and the kernel's settings files. Paths
// are canonical, /proc/... or /sys/...; values are decimal text without
// the trailing newline.
type files interface {
	// read returns the file's content, trimmed.
	read(path string) (string, error)
	// write replaces the file's content with value.
	write(path, value string) error
}

// osFiles reads and writes the files of a mounted procfs and sysfs, from
// inside a network namespace when netns is set: a /proc/sys/net file
// belongs to the namespace of the thread that opens it.
type osFiles struct {
	procRoot, sysRoot string // default /proc and /sys
	netns             string // "": the current namespace
}

var _ files = (*osFiles)(nil)

func newOSFiles(c *Config) *osFiles {
	return &osFiles{procRoot: c.ProcRoot, sysRoot: c.SysRoot, netns: c.NetNS}
}

// resolve maps a canonical path to the configured mounts.
func (f *osFiles) resolve(path string) string {
	for _, m := range []struct{ prefix, root string }{{"/proc/", f.procRoot}, {"/sys/", f.sysRoot}} {
		if rest, ok := strings.CutPrefix(path, m.prefix); ok && m.root != "" {
			return filepath.Join(m.root, rest)
		}
	}
	return path
}

func (f *osFiles) read(path string) (string, error) {
	var out string
	err := inNetNS(f.netns, func() error {
		b, err := os.ReadFile(f.resolve(path))
		out = strings.TrimSpace(string(b))
		return err
	})
	return out, err
}

// write writes value in one write(2), as sysctl(8) does: procfs takes a
// setting from the first write only.
func (f *osFiles) write(path, value string) error {
	return inNetNS(f.netns, func() error {
		file, err := os.OpenFile(f.resolve(path), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, err = file.WriteString(value + "\n")
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		return err
	})
}
