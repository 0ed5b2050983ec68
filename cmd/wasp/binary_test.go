package main

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// buildTags are the tags wasp is built with (Makefile BUILD_TAGS, the
// Dockerfile, the end-to-end framework).
const buildTags = "grpcnotrace"

// TestBinaryDeadCodeElimination: nothing reachable in wasp calls
// reflect's Method or MethodByName. One such call makes the linker keep
// every exported method of every type in the binary; through gRPC's
// golang.org/x/net/trace (html/template) it nearly doubled wasp's text
// and added about 17 MB of RSS. The linker's dependency dump marks each
// such caller <ReflectMethod>.
func TestBinaryDeadCodeElimination(t *testing.T) {
	if testing.Short() {
		t.Skip("links wasp: skipped with -short")
	}
	cmd := exec.Command("go", "build", "-tags", buildTags, "-ldflags=-dumpdep", "-o", t.TempDir()+"/wasp", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v\n%s", err, stderr.Bytes()[:min(stderr.Len(), 4096)])
	}
	var callers []string
	sc := bufio.NewScanner(&stderr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if from, _, ok := strings.Cut(sc.Text(), " <ReflectMethod> -> "); ok {
			callers = append(callers, from)
		}
	}
	if len(callers) > 0 {
		t.Fatalf("reachable callers of reflect.Value.Method(ByName): %q; find who imports them (go build -ldflags=-dumpdep) and keep them out, or build them out with a tag", callers)
	}
}
