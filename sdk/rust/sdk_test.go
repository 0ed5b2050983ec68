// Package rust_test runs the Rust SDK's unit tests, which check it against
// the golden vectors of abi/testdata, and builds the SDK for Wasm. Both
// skip when the toolchain is missing, unless WASP_RUST is set (make rust).
package rust_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/abi/metadata"
	"github.com/wasp-proxy/wasp/host/runtime"
	"github.com/wasp-proxy/wasp/internal/rustbuild"
)

func TestNative(t *testing.T) {
	ctx := context.Background()
	tc, err := rustbuild.FindNative(ctx)
	if err != nil {
		rustbuild.SkipOrFail(t, err)
	}
	out, err := tc.Test(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "test result: ok") || strings.Contains(out, " 0 passed") {
		t.Errorf("unexpected test output:\n%s", out)
	}
	t.Log(out)
}

// TestInWasp builds a module with the SDK for Wasm, loads it into wasp's
// runtime, and checks that each stage turns the golden input into the
// golden output byte for byte, call after call.
func TestInWasp(t *testing.T) {
	ctx := context.Background()
	wasm, rt := goldenModule(t)
	meta, err := runtime.Inspect(wasm)
	if err != nil {
		t.Fatal(err)
	}
	want := metadata.Metadata{
		Name: "rust-golden", Version: "1.0.0", ABI: 1,
		Stages:         []string{"topology", "traffic-policy", "endpoint-selection"},
		MinHostVersion: "0.1.0",
		Description:    "The golden outputs of abi/testdata, for the Rust SDK's tests.",
	}
	if !reflect.DeepEqual(*meta, want) {
		t.Errorf("metadata %+v, want %+v", *meta, want)
	}
	m, err := rt.Load(ctx, "rust-golden", wasm, runtime.Limits{Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		for _, stage := range abi.Stages {
			in := golden(t, stage.String()+".input.hex")
			out, err := m.Call(ctx, stage, in, nil)
			if err != nil {
				t.Fatalf("%s: %v", stage, err)
			}
			if want := golden(t, stage.String()+".output.hex"); !bytes.Equal(out, want) {
				t.Errorf("round %d %s: output\n%x\nwant\n%x", round, stage, out, want)
			}
		}
	}
	// A batch for another stage than the one called gets no output.
	_, err = m.Call(ctx, abi.StageTopology, golden(t, "traffic-policy.input.hex"), nil)
	if runtime.ReasonOf(err) != runtime.ReasonNoOutput {
		t.Errorf("topology call with a traffic-policy batch: %v, want reason %s", err, runtime.ReasonNoOutput)
	}
}

// TestConfigureInWasp loads the golden module, whose configure handler
// rejects a configuration containing "reject", with configurations: its
// wasp_configure export reaches the handler and returns its message.
func TestConfigureInWasp(t *testing.T) {
	ctx := context.Background()
	wasm, rt := goldenModule(t)
	for _, tt := range []struct{ config, want string }{
		{"", ""},
		{`{"zones": ["zone-b"]}`, ""},
		{`{"reject": true}`, `module "rust-golden" rejected its configuration: rejected on purpose (16 bytes)`},
	} {
		m, err := rt.Load(ctx, "rust-golden", wasm, runtime.Limits{Instances: 1}, runtime.WithConfig([]byte(tt.config)))
		if tt.want == "" {
			if err != nil {
				t.Errorf("config %q: %v", tt.config, err)
				continue
			}
			if out, err := m.Call(ctx, abi.StageTopology, golden(t, "topology.input.hex"), nil); err != nil || !bytes.Equal(out, golden(t, "topology.output.hex")) {
				t.Errorf("config %q: topology output %x, %v; want the golden output", tt.config, out, err)
			}
			m.Close()
			continue
		}
		if !errors.Is(err, runtime.ErrConfigRejected) || err.Error() != tt.want {
			t.Errorf("config %q: got %v, want ErrConfigRejected %q", tt.config, err, tt.want)
		}
	}
}

// goldenModule builds testdata/golden for Wasm and returns it with a
// runtime to load it into.
func goldenModule(t *testing.T) ([]byte, *runtime.Runtime) {
	t.Helper()
	ctx := context.Background()
	tc, err := rustbuild.Find(ctx)
	if err != nil {
		rustbuild.SkipOrFail(t, err)
	}
	wasm, err := tc.Build(ctx, rustbuild.Paths{SDK: ".", Module: filepath.Join("testdata", "golden")})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	return wasm, rt
}

// golden reads a hex file of abi/testdata.
func golden(t *testing.T, name string) []byte {
	t.Helper()
	s, err := os.ReadFile(filepath.Join("..", "..", "abi", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.ReplaceAll(string(s), "\n", ""))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}
