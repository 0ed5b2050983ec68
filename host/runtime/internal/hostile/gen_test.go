package hostile_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/wasp-proxy/wasp/host/runtime/internal/hostile"
	"github.com/wasp-proxy/wasp/host/runtime/internal/wasmbin"
)

// generated returns the programs of the seeds and of n random inputs
// (a fixed sequence), with the input of each.
func generated(n int) (inputs [][]byte, programs []*hostile.Program) {
	for _, s := range hostile.Seeds() {
		inputs = append(inputs, s.Data)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range n {
		in := make([]byte, rng.IntN(400))
		for i := range in {
			in[i] = byte(rng.Uint32())
		}
		inputs = append(inputs, in)
	}
	for _, in := range inputs {
		programs = append(programs, hostile.Generate(in))
	}
	return inputs, programs
}

// TestGenerateValid: every generated module is valid, before and after
// instrumentation, so that fuzzing never spends its time on modules
// wazero refuses. It compiles with wazero's interpreter, which validates
// exactly as its compiler does, in a fraction of the time.
func TestGenerateValid(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	inputs, programs := generated(n)
	for i, p := range programs {
		check := func(what string, wasm []byte) {
			t.Helper()
			c, err := r.CompileModule(ctx, wasm)
			if err != nil {
				t.Fatalf("input %x: %s module does not compile: %v\n%s", inputs[i], what, err, p.Text)
			}
			_ = c.Close(ctx)
		}
		check("generated", p.Wasm)
		instrumented, err := wasmbin.Instrument(p.Wasm)
		if err != nil {
			t.Fatalf("input %x: Instrument: %v\n%s", inputs[i], err, p.Text)
		}
		check("instrumented", instrumented)
	}
}

// TestGenerateDeterministic: the same input gives the same module.
func TestGenerateDeterministic(t *testing.T) {
	inputs, programs := generated(200)
	for i, in := range inputs {
		again := hostile.Generate(in)
		if !bytes.Equal(again.Wasm, programs[i].Wasm) || again.Text != programs[i].Text {
			t.Fatalf("input %x: two different modules", in)
		}
	}
}

// TestGenerateCovers: random inputs reach every kind of piece and of
// output, so that the generator cannot drift into never producing one.
func TestGenerateCovers(t *testing.T) {
	_, programs := generated(3000)
	kinds := map[hostile.OutputKind]bool{}
	var text strings.Builder
	for _, p := range programs {
		kinds[p.Kind] = true
		text.WriteString(p.Text)
	}
	for _, name := range hostile.PieceNames {
		if !strings.Contains(text.String(), " "+name) {
			t.Errorf("no program has a %s", name)
		}
	}
	for k := hostile.OutputWritten; k <= hostile.OutputInput; k++ {
		if !kinds[k] {
			t.Errorf("no program has an output %s", k)
		}
	}
}

// TestSeeds: each seed's program has the piece or the output its name
// starts with.
func TestSeeds(t *testing.T) {
	for _, s := range hostile.Seeds() {
		t.Run(s.Name, func(t *testing.T) {
			p := hostile.Generate(s.Data)
			piece, rest, _ := strings.Cut(s.Name, " ")
			if piece == "output" {
				if kind, _, _ := strings.Cut(rest, " "); p.Kind.String() != kind {
					t.Errorf("output %s, want %s:\n%s", p.Kind, kind, p.Text)
				}
			} else if !strings.Contains(p.Text, " "+piece) {
				t.Errorf("program has no %s:\n%s", piece, p.Text)
			}
			t.Logf("\n%s", p.Text)
		})
	}
}
