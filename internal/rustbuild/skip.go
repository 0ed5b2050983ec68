package rustbuild

import (
	"os"
	"testing"
)

// SkipOrFail ends a test that needs the Rust toolchain, which err says is
// missing: a skip with the reason, or a failure when RequireEnv is set.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s is set and the Rust toolchain is missing: %v", RequireEnv, err)
	}
	t.Skip("needs the Rust toolchain:", err)
}
