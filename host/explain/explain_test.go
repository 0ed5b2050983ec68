package explain_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasp-proxy/wasp/abi"
	"github.com/wasp-proxy/wasp/examples/cluster"
	"github.com/wasp-proxy/wasp/host/chain"
	"github.com/wasp-proxy/wasp/host/explain"
	"github.com/wasp-proxy/wasp/host/objects"
	"github.com/wasp-proxy/wasp/host/pipeline"
	"github.com/wasp-proxy/wasp/host/runtime"
)

var update = flag.Bool("update", false, "rewrite testdata")

// TestSample pins what every node of the sample cluster does with every
// Service, through the embedded Wasm modules and through the native
// reference: both must print exactly the golden documents.
func TestSample(t *testing.T) {
	objs, err := objects.Decode(bytes.NewReader(cluster.Sample), "sample.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	c, err := chain.Load(context.Background(), rt, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		t.Run(node, func(t *testing.T) {
			golden := filepath.Join("testdata", "sample-"+node+".jsonl")
			for _, impl := range []struct {
				name string
				p    *pipeline.Pipeline
			}{
				{"wasm", pipeline.New(pipeline.Options{Modules: c.PipelineModules()})},
				{"native", pipeline.New(pipeline.Options{})},
			} {
				docs, err := explain.Explain(context.Background(), objs, node, impl.p)
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				if err := explain.WriteJSON(&buf, docs); err != nil {
					t.Fatal(err)
				}
				if *update && impl.name == "wasm" {
					if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf.Bytes(), want) {
					t.Errorf("%s: output differs from %s:\n%s", impl.name, golden, buf.String())
				}
			}
		})
	}
}

func TestMissingNode(t *testing.T) {
	objs, err := objects.Decode(bytes.NewReader(cluster.Sample), "sample.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = explain.Explain(context.Background(), objs, "node-z", pipeline.New(pipeline.Options{}))
	if err == nil {
		t.Fatal("want an error for a node that is not in the input")
	}
}

// stderrModule fails every call as a module that wrote terminal escapes
// to stderr.
type stderrModule struct{}

func (stderrModule) Call(_ context.Context, stage abi.Stage, _, dst []byte) ([]byte, error) {
	return dst, &runtime.CallError{Module: "hostile", Stage: stage, Reason: runtime.ReasonTrap,
		Err: errors.New("unreachable \u202etxt.exe"), Stderr: "\x1b[2J\x1b[1;1Hall ports healthy\x1b]0;title\a"}
}

func (stderrModule) Instances() int { return 1 }

// TestErrorEscaped: what a failing module wrote reaches explain's error
// text with its terminal escapes escaped.
func TestErrorEscaped(t *testing.T) {
	objs, err := objects.Decode(bytes.NewReader(cluster.Sample), "sample.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var mods [len(abi.Stages) + 1]pipeline.Module
	mods[abi.StageEndpointSelection] = stderrModule{}
	docs, err := explain.Explain(context.Background(), objs, "node-a", pipeline.New(pipeline.Options{Modules: mods}))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no documents")
	}
	for _, d := range docs {
		if !strings.Contains(d.Error, `(stderr: \x1b[2J\x1b[1;1Hall ports healthy\x1b]0;title\a)`) || !strings.Contains(d.Error, `unreachable \u202etxt.exe`) {
			t.Fatalf("%s: error %q, want the module's text escaped", d.Service, d.Error)
		}
		if strings.ContainsAny(d.Error, "\x1b\a\u202e") {
			t.Fatalf("%s: error %q holds control characters", d.Service, d.Error)
		}
	}
}
