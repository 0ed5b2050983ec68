// Package rustbuild builds Rust policy modules with rustc alone, against the
// SDK in sdk/rust, and runs the SDK's native tests. The build needs only
// what Debian ships (the rustc and libstd-rust-dev-wasm32 packages): no
// cargo, no crates registry. `make rust` and the tests of the Rust SDK and
// of examples/rust-prefer-local use it.
package rustbuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Target is the Wasm target Rust modules are built for. A module built for
// it imports nothing, which the host allows (docs/abi.md §2.4).
const Target = "wasm32-unknown-unknown"

// Edition is the Rust edition of the SDK and of the modules built here.
const Edition = "2021"

// RequireEnv names the environment variable that, set to a non-empty value,
// makes a missing Rust toolchain a test failure rather than a skip. `make
// rust`, which CI runs, sets it.
const RequireEnv = "WASP_RUST"

// ErrNoToolchain is wrapped by Find's error when no rustc with the Wasm
// standard library is installed.
var ErrNoToolchain = errors.New("no rustc with the " + Target + " standard library")

// Toolchain is a rustc that can build for Target.
type Toolchain struct {
	// Rustc is the path of the rustc executable.
	Rustc string
}

// candidates returns the rustc commands to try, in order: $RUSTC, rustc on
// PATH, and Debian's /usr/bin/rustc, which a rustup installation earlier on
// PATH may shadow.
func candidates() []string {
	var out []string
	if r := os.Getenv("RUSTC"); r != "" {
		out = append(out, r)
	}
	if p, err := exec.LookPath("rustc"); err == nil {
		out = append(out, p)
	}
	out = append(out, "/usr/bin/rustc")
	return out
}

// Find returns the first rustc of candidates whose standard library for
// Target is installed. Its error, wrapping ErrNoToolchain, says what was
// tried and how to install the toolchain.
func Find(ctx context.Context) (Toolchain, error) { return FindVersion(ctx, "") }

// FindVersion is Find for a rustc whose version line starts with version
// ("rustc 1.63.0"); "" takes any.
func FindVersion(ctx context.Context, version string) (Toolchain, error) {
	var tried []string
	seen := map[string]bool{}
	for _, rustc := range candidates() {
		if seen[rustc] {
			continue
		}
		seen[rustc] = true
		tc := Toolchain{Rustc: rustc}
		if err := hasStd(ctx, rustc, Target); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", rustc, err))
			continue
		}
		if version != "" {
			v, err := tc.Version(ctx)
			if err != nil {
				tried = append(tried, err.Error())
				continue
			}
			if v != version && !strings.HasPrefix(v, version+" ") {
				tried = append(tried, fmt.Sprintf("%s: %q, want %q", rustc, v, version))
				continue
			}
		}
		return tc, nil
	}
	return Toolchain{}, fmt.Errorf("%w (apt-get install rustc libstd-rust-dev-wasm32); tried %s",
		ErrNoToolchain, strings.Join(tried, "; "))
}

// FindNative returns the first rustc of candidates that runs, for native
// builds such as the SDK's unit tests.
func FindNative(ctx context.Context) (Toolchain, error) {
	var tried []string
	for _, rustc := range candidates() {
		if out, err := exec.CommandContext(ctx, rustc, "--version").CombinedOutput(); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v %s", rustc, err, strings.TrimSpace(string(out))))
			continue
		}
		return Toolchain{Rustc: rustc}, nil
	}
	return Toolchain{}, fmt.Errorf("no rustc (apt-get install rustc); tried %s", strings.Join(tried, "; "))
}

// hasStd reports whether rustc has the standard library of target.
func hasStd(ctx context.Context, rustc, target string) error {
	out, err := exec.CommandContext(ctx, rustc, "--print", "target-libdir", "--target", target).Output()
	if err != nil {
		return err
	}
	dir := strings.TrimSpace(string(out))
	m, _ := filepath.Glob(filepath.Join(dir, "libstd-*.rlib"))
	if len(m) == 0 {
		return fmt.Errorf("no standard library in %s", dir)
	}
	return nil
}

// Paths locates the SDK and a module crate.
type Paths struct {
	// SDK is the directory of the SDK crate (sdk/rust). Required.
	SDK string
	// Module is the directory of the module crate. Required for Build.
	Module string
	// Root is the crate's root file, relative to Module: src/lib.rs when
	// empty. wasp's default modules keep theirs as lib.rs beside their Go
	// sources.
	Root string
}

// Profile is a set of code generation options.
type Profile int

const (
	// Small optimises for size, each crate on its own: what the SDK's
	// README tells vendors to use.
	Small Profile = iota
	// Fast optimises for speed, links the SDK into the module with
	// link-time optimisation, so that its small accessors inline into the
	// module's loops, and uses the Wasm features after the MVP that
	// wazero runs (fastFeatures): what wasp's default modules are built
	// with.
	Fast
)

// fastFeatures are the Wasm features of the Fast profile, all in wazero's
// core features 2.0: copies become one memory.copy rather than a call to
// a byte loop (RATIONALE.md, "Why are the default Rust modules built with
// bulk memory and the other post-MVP features?").
const fastFeatures = "+bulk-memory,+sign-ext,+nontrapping-fptoint,+mutable-globals"

// flags returns the rustc options of p, for both crates; lto those of the
// module's link only.
func (p Profile) flags() (common, lto []string) {
	if p == Fast {
		return []string{"-C", "opt-level=3", "-C", "target-feature=" + fastFeatures}, []string{"-C", "lto=fat"}
	}
	return []string{"-C", "opt-level=s"}, nil
}

// Build compiles the SDK for Target and then the module crate as a cdylib
// against it, with the Small profile, and returns the module's bytes.
// Paths are remapped and symbols stripped, so the bytes do not depend on
// where the tree lives; the module's metadata section is written by the
// SDK's module! macro.
func (tc Toolchain) Build(ctx context.Context, p Paths) ([]byte, error) {
	return tc.BuildProfile(ctx, p, Small)
}

// BuildProfile is Build with the code generation options of profile.
func (tc Toolchain) BuildProfile(ctx context.Context, p Paths, profile Profile) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "wasp-rustbuild-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	sdk, mod, err := abs(p.SDK, p.Module)
	if err != nil {
		return nil, err
	}
	root := p.Root
	if root == "" {
		root = filepath.Join("src", "lib.rs")
	}
	opt, lto := profile.flags()
	rlib := filepath.Join(tmp, "libwasp.rlib")
	// panic=abort is the target's default; said here so that the bytes do
	// not hang on it.
	common := append([]string{"--edition", Edition, "--target", Target,
		"-C", "codegen-units=1", "-C", "strip=symbols", "-C", "panic=abort",
		"--remap-path-prefix", sdk + "=sdk/rust", "--remap-path-prefix", mod + "=module",
		"--remap-path-prefix", tmp + "=build"}, opt...)
	if err := tc.run(ctx, append(common, "--crate-type", "rlib", "--crate-name", "wasp",
		"-o", rlib, filepath.Join(sdk, "src", "lib.rs"))...); err != nil {
		return nil, err
	}
	out := filepath.Join(tmp, "module.wasm")
	if err := tc.run(ctx, append(append(common, lto...), "--crate-type", "cdylib", "--crate-name", "module",
		"--extern", "wasp="+rlib, "-o", out, filepath.Join(mod, root))...); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// Test builds the SDK's unit tests natively and runs them; the error holds
// the output of a failing build or test run.
func (tc Toolchain) Test(ctx context.Context, sdkDir string) (string, error) {
	tmp, err := os.MkdirTemp("", "wasp-rustbuild-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	sdk, _, err := abs(sdkDir, sdkDir)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(tmp, "wasp-sdk-test")
	if err := tc.run(ctx, "--edition", Edition, "--test", "--crate-name", "wasp",
		"-o", bin, filepath.Join(sdk, "src", "lib.rs")); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rust SDK tests: %w\n%s", err, out)
	}
	return string(out), nil
}

func (tc Toolchain) run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, tc.Rustc, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", tc.Rustc, strings.Join(args, " "), err, out)
	}
	return nil
}

func abs(a, b string) (string, string, error) {
	x, err := filepath.Abs(a)
	if err != nil {
		return "", "", err
	}
	y, err := filepath.Abs(b)
	return x, y, err
}

// Version returns rustc's version line, "rustc 1.63.0" and what follows.
func (tc Toolchain) Version(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, tc.Rustc, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", tc.Rustc, err)
	}
	return strings.TrimSpace(string(out)), nil
}
