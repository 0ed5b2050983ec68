package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strings"
)

// compiledCacheDir prepares the directory under dir where compiled machine
// code is kept, and returns it. What wazero reads back from there is
// native code that wasp runs, checked only against corruption (a CRC), so
// dir must be writable by wasp's user alone: anyone else who can write
// there can make wasp run code of theirs. Entries are keyed by the digest
// of the (instrumented) module; the directory is named after the wasp
// build, so that a build never runs code another build compiled.
func compiledCacheDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := checkPrivateDir(dir); err != nil {
		return "", err
	}
	sub := filepath.Join(dir, "compiled", buildKey())
	if err := os.MkdirAll(sub, 0o700); err != nil {
		return "", err
	}
	return sub, nil
}

// buildKey names this build of wasp: its version, its Go version and, when
// the binary records one, its source revision.
func buildKey() string {
	key := HostVersion + "-" + strings.TrimPrefix(goruntime.Version(), "go")
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return key
	}
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			key += "-" + s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			key += "-dirty"
		}
	}
	return key
}

// errSharedCache is wrapped by errors about a cache directory others can
// write.
var errSharedCache = fmt.Errorf("compiled code read from it would run as wasp: it must be writable by wasp's user alone")
