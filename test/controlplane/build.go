package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Versions of the components Build compiles.
const (
	// KubernetesVersion is the k8s.io/kubernetes module kube-apiserver and
	// kube-proxy are built from. v1.36.3 is the newest release whose module
	// zip the Go module proxy serves.
	KubernetesVersion = "v1.36.3"
	// EtcdVersion is the go.etcd.io/etcd/server/v3 module etcd is built from.
	EtcdVersion = "v3.6.16"
	// CosignVersion is the github.com/sigstore/cosign/v3 module cosign is
	// built from, for the tests of wasp's signatures against cosign's.
	CosignVersion = "v3.1.3"
)

const (
	kubernetesModule = "k8s.io/kubernetes"
	apiserverPackage = kubernetesModule + "/cmd/kube-apiserver"
	kubeProxyPackage = kubernetesModule + "/cmd/kube-proxy"
	etcdModule       = "go.etcd.io/etcd/server/v3"
	cosignModule     = "github.com/sigstore/cosign/v3"

	// recipe is part of every version stamp: bump it when the way binaries
	// are built changes, so cached binaries are rebuilt.
	recipe = "1"
)

// Binaries are the executables Build produced.
type Binaries struct {
	Dir           string // the cache directory (WASP_E2E_DIR)
	KubeAPIServer string // path of kube-apiserver
	Etcd          string // path of etcd
}

// CacheDir is where Build keeps wrapper modules and binaries: $WASP_E2E_DIR,
// or wasp-e2e in the system temporary directory (${TMPDIR:-/tmp}).
func CacheDir() string {
	if d := os.Getenv("WASP_E2E_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "wasp-e2e")
}

var (
	buildMu     sync.Mutex
	builtResult *Binaries
	builtProxy  string // path of kube-proxy, once BuildKubeProxy succeeded
	builtCosign string // path of cosign, once BuildCosign succeeded
)

// Build compiles kube-apiserver KubernetesVersion and etcd EtcdVersion from
// the Go module proxy into CacheDir()/bin, unless binaries stamped with the
// same versions are already there. It is safe to call concurrently, also
// from several test processes (a file lock serialises builds).
//
// The first build needs network access to the module proxy, about five
// minutes on two cores and 2-3 GB in the Go module and build caches.
// Progress is logged through the klog logger of ctx.
func Build(ctx context.Context) (Binaries, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtResult != nil {
		return *builtResult, nil
	}
	dir := CacheDir()
	b := Binaries{
		Dir:           dir,
		KubeAPIServer: filepath.Join(dir, "bin", "kube-apiserver"),
		Etcd:          filepath.Join(dir, "bin", "etcd"),
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return Binaries{}, err
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return Binaries{}, fmt.Errorf("lock build directory: %w", err)
	}
	defer unlock()

	if err := buildOnce(ctx, b.KubeAPIServer, "kube-apiserver "+KubernetesVersion, func() error {
		return buildKubernetes(ctx, filepath.Join(dir, "build", "kubernetes"), b.KubeAPIServer, apiserverPackage)
	}); err != nil {
		return Binaries{}, err
	}
	if err := buildOnce(ctx, b.Etcd, "etcd "+EtcdVersion, func() error {
		return buildEtcd(ctx, filepath.Join(dir, "build", "etcd"), b.Etcd)
	}); err != nil {
		return Binaries{}, err
	}
	builtResult = &b
	return b, nil
}

// BuildKubeProxy compiles upstream kube-proxy KubernetesVersion
// (k8s.io/kubernetes/cmd/kube-proxy) into CacheDir()/bin, in the same
// wrapper module as kube-apiserver, unless a binary stamped with the same
// version is already there, and returns its path. Only tests that compare
// wasp with upstream need it, so Build does not build it. Safe to call
// concurrently, also from several test processes.
//
// With kube-apiserver built, the Go build cache is warm and this takes
// seconds to a minute; on its own it costs about as much as Build.
func BuildKubeProxy(ctx context.Context) (string, error) {
	return buildTool(ctx, &builtProxy, "kube-proxy", KubernetesVersion, func(dir, bin string) error {
		return buildKubernetes(ctx, filepath.Join(dir, "build", "kubernetes"), bin, kubeProxyPackage)
	})
}

// BuildCosign compiles cosign CosignVersion into CacheDir()/bin, unless a
// binary stamped with that version is already there, and returns its
// path. The first build takes about four minutes on two cores. Safe to
// call concurrently, also from several test processes.
func BuildCosign(ctx context.Context) (string, error) {
	return buildTool(ctx, &builtCosign, "cosign", CosignVersion, func(dir, bin string) error {
		return buildModule(ctx, filepath.Join(dir, "build", "cosign"), bin, cosignModule, CosignVersion, cosignModule+"/cmd/cosign")
	})
}

// buildTool builds CacheDir()/bin/NAME with build(CacheDir(), bin) once
// per version, under the build lock, and remembers its path in *built.
func buildTool(ctx context.Context, built *string, name, version string, build func(dir, bin string) error) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if *built != "" {
		return *built, nil
	}
	dir := CacheDir()
	bin := filepath.Join(dir, "bin", name)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", fmt.Errorf("lock build directory: %w", err)
	}
	defer unlock()
	if err := buildOnce(ctx, bin, name+" "+version, func() error { return build(dir, bin) }); err != nil {
		return "", err
	}
	*built = bin
	return bin, nil
}

// buildOnce runs build unless bin exists and bin.version holds stamp.
func buildOnce(ctx context.Context, bin, stamp string, build func() error) error {
	logger := klog.FromContext(ctx)
	stamp += " recipe " + recipe + "\n"
	stampFile := bin + ".version"
	if got, err := os.ReadFile(stampFile); err == nil && string(got) == stamp {
		if _, err := os.Stat(bin); err == nil {
			logger.V(1).Info("Using cached binary", "binary", bin)
			return nil
		}
	}
	_ = os.Remove(stampFile)
	logger.Info("Building binary from the Go module proxy, the first time takes minutes", "binary", bin, "version", strings.TrimSpace(stamp))
	start := time.Now()
	if err := build(); err != nil {
		return fmt.Errorf("build %s: %w", filepath.Base(bin), err)
	}
	logger.Info("Built binary", "binary", bin, "duration", time.Since(start).Round(time.Second))
	return os.WriteFile(stampFile, []byte(stamp), 0o644)
}

// buildKubernetes builds pkg, a command of k8s.io/kubernetes, in a wrapper
// module.
//
// Why a wrapper module? k8s.io/kubernetes requires its staging modules
// (k8s.io/api, k8s.io/apiserver, ...) as v0.0.0 and replaces them with
// ./staging/src/..., so `go install k8s.io/kubernetes/cmd/kube-apiserver@v`
// is refused. The wrapper requires k8s.io/kubernetes and replaces each of
// those v0.0.0 requirements with the published staging release, v0.<minor>.<patch>.
// The list comes from upstream's own go.mod, so it follows the version.
func buildKubernetes(ctx context.Context, dir, out, pkg string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// "ready" marks a wrapper module whose go.mod is written; one
	// "ready-<command>" per command marks that `go get` resolved the
	// dependencies of that command (each command needs a few of its own).
	done := filepath.Join(dir, "ready")
	want := kubernetesModule + " " + KubernetesVersion + " recipe " + recipe + "\n"
	pkgDone := filepath.Join(dir, "ready-"+filepath.Base(pkg))
	if got, err := os.ReadFile(done); err != nil || string(got) != want {
		upstream, err := downloadGoMod(ctx, dir, kubernetesModule+"@"+KubernetesVersion)
		if err != nil {
			return err
		}
		gomod, err := kubernetesWrapperGoMod(upstream, KubernetesVersion)
		if err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(dir, "go.sum"))
		if stale, err := filepath.Glob(filepath.Join(dir, "ready-*")); err == nil {
			for _, f := range stale {
				_ = os.Remove(f)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o644); err != nil {
			return err
		}
		// go get resolves exactly the dependencies the command needs.
		if err := goCmd(ctx, dir, "get", kubernetesModule+"@"+KubernetesVersion, pkg+"@"+KubernetesVersion); err != nil {
			return err
		}
		if err := os.WriteFile(done, []byte(want), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(pkgDone, []byte(want), 0o644); err != nil {
			return err
		}
	}
	if got, err := os.ReadFile(pkgDone); err != nil || string(got) != want {
		if err := goCmd(ctx, dir, "get", pkg+"@"+KubernetesVersion); err != nil {
			return err
		}
		if err := os.WriteFile(pkgDone, []byte(want), 0o644); err != nil {
			return err
		}
	}
	// Stamp the version like upstream's hack/lib/version.sh does; otherwise
	// the binaries report v0.0.0-master.
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := []string{"-s", "-w"}
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ldflags = append(ldflags,
			"-X", p+".gitVersion="+KubernetesVersion,
			"-X", p+".gitMajor="+major,
			"-X", p+".gitMinor="+minor,
			"-X", p+".gitTreeState=clean")
	}
	return goBuild(ctx, dir, out, strings.Join(ldflags, " "), pkg)
}

// buildEtcd builds etcd in a wrapper module. go.etcd.io/etcd/server/v3 is
// etcd's main package, but its go.mod has replace directives (../api, ...),
// so `go install` refuses it; required from another module it builds.
func buildEtcd(ctx context.Context, dir, out string) error {
	return buildModule(ctx, dir, out, etcdModule, EtcdVersion, etcdModule)
}

// buildModule builds pkg of module at version in a wrapper module dir.
func buildModule(ctx context.Context, dir, out, module, version, pkg string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	done := filepath.Join(dir, "ready")
	want := module + " " + version + " recipe " + recipe + "\n"
	if got, err := os.ReadFile(done); err != nil || string(got) != want {
		_ = os.Remove(filepath.Join(dir, "go.sum"))
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module waspe2e/"+filepath.Base(dir)+"\n"), 0o644); err != nil {
			return err
		}
		if err := goCmd(ctx, dir, "get", module+"@"+version); err != nil {
			return err
		}
		if err := os.WriteFile(done, []byte(want), 0o644); err != nil {
			return err
		}
	}
	return goBuild(ctx, dir, out, "-s -w", pkg)
}

// goBuild builds pkg inside the wrapper module dir into out, atomically.
func goBuild(ctx context.Context, dir, out, ldflags, pkg string) error {
	tmp := out + ".tmp"
	if err := goCmd(ctx, dir, "build", "-trimpath", "-ldflags", ldflags, "-o", tmp, pkg); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// downloadGoMod downloads module@version and returns its go.mod.
func downloadGoMod(ctx context.Context, dir, modVersion string) ([]byte, error) {
	cmd := goCommand(ctx, dir, "mod", "download", "-json", modVersion)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	var info struct{ GoMod, Error string }
	if jerr := json.Unmarshal(stdout, &info); jerr != nil || err != nil || info.Error != "" {
		return nil, fmt.Errorf("go mod download %s: %v %s %s", modVersion, errors.Join(err, jerr), info.Error, lastLines(stderr.Bytes(), 20))
	}
	return os.ReadFile(info.GoMod)
}

func goCmd(ctx context.Context, dir string, args ...string) error {
	cmd := goCommand(ctx, dir, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, lastLines(out, 30))
	}
	return nil
}

func goCommand(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	// Static binaries, no VCS stamping (the wrapper has no repository), and
	// never a go.work of whatever checkout the tests run from.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false -mod=mod", "GOWORK=off")
	return cmd
}

// kubernetesWrapperGoMod renders the wrapper module's go.mod from
// k8s.io/kubernetes's own go.mod (upstream) at version.
func kubernetesWrapperGoMod(upstream []byte, version string) ([]byte, error) {
	goVersion, staging := parseGoMod(upstream)
	if goVersion == "" || len(staging) == 0 {
		return nil, fmt.Errorf("%s@%s go.mod: found go version %q and %d staging modules", kubernetesModule, version, goVersion, len(staging))
	}
	stagingVersion := "v0." + strings.TrimPrefix(version, "v1.")
	var b bytes.Buffer
	fmt.Fprintf(&b, "module waspe2e/kubernetes\n\ngo %s\n\nrequire %s %s\n\nreplace (\n", goVersion, kubernetesModule, version)
	for _, m := range staging {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, stagingVersion)
	}
	b.WriteString(")\n")
	return b.Bytes(), nil
}

// parseGoMod returns the go directive of a go.mod and the k8s.io modules it
// requires at v0.0.0 (the staging modules), in file order.
func parseGoMod(gomod []byte) (goVersion string, staging []string) {
	inRequire := false
	for _, line := range strings.Split(string(gomod), "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case len(f) == 2 && f[0] == "go" && !inRequire:
			goVersion = f[1]
			continue
		case len(f) == 2 && f[0] == "require" && f[1] == "(":
			inRequire = true
			continue
		case inRequire && f[0] == ")":
			inRequire = false
			continue
		case f[0] == "require" && !inRequire:
			f = f[1:]
		case !inRequire:
			continue
		}
		if len(f) == 2 && strings.HasPrefix(f[0], "k8s.io/") && f[1] == "v0.0.0" {
			staging = append(staging, f[0])
		}
	}
	return goVersion, staging
}

// lastLines returns at most n trailing lines of b, for error messages.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
