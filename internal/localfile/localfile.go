// Package localfile reads the files that configuration names: module
// sources (file://), public keys, trusted roots and registry credentials,
// named by wasp's configuration, its command line or a
// ServiceProxyModule.
//
// Such a path may name anything on the node, so Read opens regular files
// only (never a device such as /dev/zero, a FIFO or a socket, whose reads
// may never end or block), reads at most a limit, and its errors name the
// path and the limit but never hold a byte of the file.
package localfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MaxKeyFileSize bounds a public key, trusted root or credential file:
// a PEM key is a few hundred bytes, Sigstore's public trusted root some
// ten KiB.
const MaxKeyFileSize = 1 << 20

var (
	// ErrNotRegular: the path names a directory, device, FIFO or socket.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more than the limit.
	ErrTooLarge = errors.New("file too large")
	// ErrOutside: the path is not under any directory allowed.
	ErrOutside = errors.New("not under an allowed directory")
)

// Read returns the content of the regular file at path, at most limit
// bytes; a larger file is refused (ErrTooLarge), as is anything but a
// regular file (ErrNotRegular). Symbolic links are followed.
func Read(path string, limit int64) ([]byte, error) {
	// Look before opening: opening a FIFO blocks until a writer comes,
	// opening a device may have effects.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, fi, limit); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The path may have been replaced since: check what was opened.
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(path, fi, limit); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: more than the limit of %d bytes", path, ErrTooLarge, limit)
	}
	return data, nil
}

func check(path string, fi os.FileInfo, limit int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > limit {
		return fmt.Errorf("%s: %w: %d bytes, more than the limit of %d", path, ErrTooLarge, fi.Size(), limit)
	}
	return nil
}

// kind names a file type for an error.
func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return "type " + m.Type().String()
}

// Within returns path with its symbolic links resolved if that names a
// file under one of dirs (a link under an allowed directory that leads
// out of it is refused), and an error wrapping ErrOutside if it does not.
// Read the path it returns, not path, to read what was checked. path and
// dirs must be absolute. A path outside every directory is refused
// before the file system is asked anything about it: the error says
// nothing of whether it exists.
func Within(path string, dirs []string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%s: not an absolute path", path)
	}
	path = filepath.Clean(path)
	outside := func() error {
		if len(dirs) == 0 {
			return fmt.Errorf("%s: %w: none is allowed", path, ErrOutside)
		}
		return fmt.Errorf("%s: %w (%s)", path, ErrOutside, strings.Join(dirs, ", "))
	}
	if !slices.ContainsFunc(dirs, func(d string) bool { return filepath.IsAbs(d) && under(path, filepath.Clean(d)) }) {
		return "", outside()
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			continue
		}
		if rd, err := filepath.EvalSymlinks(filepath.Clean(d)); err == nil && under(real, rd) {
			return real, nil
		}
	}
	return "", outside()
}

// under reports whether path is dir or lies below it; both clean.
func under(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
