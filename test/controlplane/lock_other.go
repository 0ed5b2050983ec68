//go:build !unix

package controlplane

// lockFile is a no-op where flock is missing: concurrent builds from several
// processes are then not serialised.
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
