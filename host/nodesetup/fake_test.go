package nodesetup

import (
	"io/fs"
	"maps"
	"slices"
	"syscall"
)

// fakeFiles is a stateful in-memory procfs and sysfs: it reads back what
// was written, has no files but those it was given, and refuses writes
// to the files in refuse with their error, as the kernel or a read-only
// mount would.
type fakeFiles struct {
	values map[string]string // path → content
	refuse map[string]error  // path → error of a write
	writes []string          // "path=value", in order
}

var _ files = (*fakeFiles)(nil)

// newFakeFiles returns a node with nf_conntrack loaded and the kernel's
// defaults for a machine with 4 CPUs and 4 GiB, plus extra.
func newFakeFiles(extra map[string]string) *fakeFiles {
	f := &fakeFiles{values: map[string]string{
		cpuOnlinePath:              "0-3",
		settingConntrackMax.path:   "65536",
		settingHashsize.path:       "16384",
		settingTCPEstablished.path: "432000",
		settingTCPCloseWait.path:   "60",
		settingTCPBeLiberal.path:   "0",
		settingUDPTimeout.path:     "30",
		settingUDPStream.path:      "120",
		settingRouteLocalnet.path:  "0",
	}, refuse: map[string]error{}}
	maps.Copy(f.values, extra)
	return f
}

func (f *fakeFiles) read(path string) (string, error) {
	v, ok := f.values[path]
	if !ok {
		return "", &fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	return v, nil
}

func (f *fakeFiles) write(path, value string) error {
	if _, ok := f.values[path]; !ok {
		return &fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	if err, ok := f.refuse[path]; ok {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f.values[path] = value
	f.writes = append(f.writes, path+"="+value)
	return nil
}

// readOnly makes the paths refuse writes as a read-only mount does.
func (f *fakeFiles) readOnly(paths ...string) *fakeFiles {
	for _, p := range paths {
		f.refuse[p] = syscall.EROFS
	}
	return f
}

// written returns the writes, sorted.
func (f *fakeFiles) written() []string {
	return slices.Sorted(slices.Values(f.writes))
}
