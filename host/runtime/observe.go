package runtime

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
)

// ErrCompile is wrapped, beside ErrInvalidModule, by a Load error from
// compiling the module to machine code.
var ErrCompile = errors.New("compile")

// observeCompiled tells Config.Compiled, if set, of a compilation asked
// for: cached if it compiled nothing.
func (r *Runtime) observeCompiled(cached bool) {
	if r.cfg.Compiled != nil {
		r.cfg.Compiled(cached)
	}
}

// cachedFiles counts the compiled modules in Config.CacheDir, or returns
// -1 if there is no CacheDir or nobody to tell (Config.Compiled). wazero
// writes a file there for every module it compiles, and none for one it
// finds there.
func (r *Runtime) cachedFiles() int {
	if r.cfg.CacheDir == "" || r.cfg.Compiled == nil {
		return -1
	}
	n := 0
	_ = filepath.WalkDir(r.cfg.CacheDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasSuffix(d.Name(), ".tmp") {
			n++
		}
		return nil
	})
	return n
}
