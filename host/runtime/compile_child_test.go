package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
)

// TestCompileChildLimitsItself runs a compile child with no parent
// watching it: it stops itself past its time or memory limit.
func TestCompileChildLimitsItself(t *testing.T) {
	tests := []struct {
		name    string
		wasm    []byte
		timeout time.Duration
		memory  uint64
		code    int
		want    string
	}{
		// Seconds to compile, far past the limit and its slack: 4 s on
		// an idle two-core machine (16,000 levels took 1.0 s there, as
		// long as the slack, and sometimes compiled before it ran out).
		{"time", hostile.Module(0, hostile.Nest(32000)), 10 * time.Millisecond, 1 << 30, exitTime, "compile child: past its time limit of 10ms"},
		// About 100 MiB to compile.
		{"memory", hostile.Module(0, hostile.BrTable(32000)), time.Minute, 40 << 20, exitMemory, "compile child: past its memory limit of 40 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "memory" {
				if _, ok := residentBytes(os.Getpid()); !ok {
					t.Skip("resident memory cannot be read here")
				}
			}
			req, err := json.Marshal(childRequest{CacheDir: t.TempDir(), Size: len(tt.wasm), Timeout: tt.timeout, Memory: tt.memory})
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), childEnv+"="+childProtocol)
			cmd.Stdin = bytes.NewReader(append(append(req, '\n'), tt.wasm...))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err = cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != tt.code || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("child: %v, stderr %q; want exit status %d and %q", err, stderr.String(), tt.code, tt.want)
			}
		})
	}
}
