package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/optest"
)

// stepRunner runs one graph over state buffers it keeps between runs.
type stepRunner struct {
	be     *Backend
	states map[string]ops.Buffer
}

// run builds a graph of rows rows at position pos (used rows in use, 0: all),
// binds the f32 or i32 inputs by name and returns the outputs as float64.
func (s *stepRunner) run(t *testing.T, rows, pos, used int, build func(b *graph.Builder, rows int) []*graph.Value, inputs map[string][]float64) [][]float64 {
	t.Helper()
	b := graph.NewBuilder("steps")
	outs := build(b, rows)
	b.Output(outs...)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	bound := map[*graph.Value]ops.Buffer{}
	for _, v := range g.Values {
		switch v.Kind {
		case graph.State:
			if s.states[v.Name] == nil {
				t.Fatalf("state %s has no buffer", v.Name)
			}
			bound[v] = s.states[v.Name]
		case graph.Input, graph.Weight:
			data := inputs[v.Name]
			if v.Name == ops.CallName {
				data = make([]float64, ops.CallLen)
				data[ops.CallPos], data[ops.CallRows] = float64(pos), float64(used)
			}
			if len(data) != v.Shape.Elems() {
				t.Fatalf("input %s: %d values for %s", v.Name, len(data), v)
			}
			buf, _ := s.be.Alloc(v.DType, len(data))
			raw := make([]byte, 4*len(data))
			for i, x := range data {
				if v.DType == graph.I32 {
					binary.LittleEndian.PutUint32(raw[4*i:], uint32(int32(x)))
				} else {
					binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(x)))
				}
			}
			if err := s.be.Write(buf, raw); err != nil {
				t.Fatal(err)
			}
			bound[v] = buf
		}
	}
	r, err := ops.NewRunner(s.be, g, bound)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Run(); err != nil {
		t.Fatal(err)
	}
	res := make([][]float64, len(outs))
	for i, o := range outs {
		buf := r.Buffer(o).(*Buffer)
		res[i] = make([]float64, buf.n)
		for j := range res[i] {
			if buf.dt == graph.I32 {
				res[i][j] = float64(buf.I32[j])
			} else {
				res[i][j] = float64(buf.F32[j])
			}
		}
	}
	return res
}

// snapshot copies a state buffer's elements as float64.
func snapshot(b ops.Buffer) []float64 {
	c := b.(*Buffer)
	out := make([]float64, c.n)
	for i := range out {
		if c.dt == graph.I32 {
			out[i] = float64(c.I32[i])
		} else {
			out[i] = float64(c.F32[i])
		}
	}
	return out
}

// stateSpec is the dtype and element count of a state buffer.
type stateSpec struct {
	dt    graph.DType
	elems int
}

// stateOp is a stateful op under the chunking test: its per-row inputs
// (width each), its states (shape, dtype), and how to build it.
type stateOp struct {
	name   string
	rowIn  map[string]int // input name -> values per row
	fixed  map[string][]float64
	ints   map[string]int // i32 inputs: vocabulary of random values
	states map[string]stateSpec
	build  func(b *graph.Builder, rows int) []*graph.Value
}

// TestStateChunking runs each stateful family op over a sequence in one
// call and in chunks of 1, 2 and 3 rows (one of them padded: a bucket of 4
// rows computing 3), and checks that the outputs and final states agree: the
// rings, the recurrent state and the caches carry exactly what a later call
// needs.
func TestStateChunking(t *testing.T) {
	const seq = 11
	f32State := func(n int) stateSpec { return stateSpec{graph.F32, n} }
	cases := []stateOp{
		{
			name:   "causal_conv/dilation=3",
			rowIn:  map[string]int{"x": 5},
			fixed:  map[string][]float64{"w": randVals(5*4, 1)},
			states: map[string]stateSpec{"ring": f32State(9 * 5)},
			build: func(b *graph.Builder, rows int) []*graph.Value {
				return []*graph.Value{ops.CausalConv(b, b.Input("x", graph.F32, rows, 5), b.Weight("w", graph.F32, 5, 1, 4),
					b.State("ring", graph.F32, 9, 5), ops.Call(b), ops.ConvAttrs{Dilation: 3, Act: ops.ActSiLU})}
			},
		},
		{
			name:   "gdn_scan",
			rowIn:  map[string]int{"q": 4, "k": 4, "v": 9, "gl": 3, "beta": 3},
			states: map[string]stateSpec{"S": f32State(3 * 4 * 3)},
			build: func(b *graph.Builder, rows int) []*graph.Value {
				return []*graph.Value{ops.GDNScan(b, b.Input("q", graph.F32, rows, 4), b.Input("k", graph.F32, rows, 4),
					b.Input("v", graph.F32, rows, 9), b.Input("gl", graph.F32, rows, 3), b.Input("beta", graph.F32, rows, 3),
					b.State("S", graph.F32, 3, 4, 3), ops.Call(b))}
			},
		},
		{
			name:   "ple_hash",
			ints:   map[string]int{"ids": 6},
			states: map[string]stateSpec{"hist": {graph.I32, 2}},
			build: func(b *graph.Builder, rows int) []*graph.Value {
				at := ops.PLEHashAttrs{NGram: 3, HeadsPerNGram: 2, EOS: 1, Mult: []int64{40323955908725927, 35454616657218691, 55314113489879455},
					Sizes: []int64{101, 103, 107, 109}, Offsets: []int64{0, 101, 204, 311}}
				return []*graph.Value{ops.PLEHash(b, b.Input("ids", graph.I32, rows), b.State("hist", graph.I32, 2), ops.Call(b), at)}
			},
		},
		{
			name:   "qsa_block_keys/ring",
			rowIn:  map[string]int{"kraw": 8},
			fixed:  map[string][]float64{"w": randVals(8, 0.3)},
			states: map[string]stateSpec{"slot": f32State(3 * 8), "keys": f32State(4 * 8)},
			build: func(b *graph.Builder, rows int) []*graph.Value {
				at := ops.BlockKeyAttrs{Block: 3, Rope: ops.RopeAttrs{HeadDim: 8, Rotary: 4, Theta: 1e4}, Eps: 1e-6, Ring: true}
				kraw := b.Input("kraw", graph.F32, rows, 8)
				ops.QSABlockKeys(b, kraw, b.Weight("w", graph.F32, 8), b.State("slot", graph.F32, graph.Dyn, 8),
					b.State("keys", graph.F32, graph.Dyn, 8), ops.Call(b), at)
				return []*graph.Value{ops.Scale(b, kraw, 1)} // an output, so the graph has one
			},
		},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// the whole sequence's inputs
			all := map[string][]float64{}
			for name, w := range c.rowIn {
				all[name] = make([]float64, seq*w)
				for i := range all[name] {
					all[name][i] = float64(float32(2*rng.Float64() - 1))
				}
			}
			if g, ok := all["gl"]; ok {
				for i := range g {
					g[i] = -math.Abs(g[i])
				}
			}
			for name, vocab := range c.ints {
				all[name] = make([]float64, seq)
				for i := range all[name] {
					all[name][i] = float64(rng.IntN(vocab))
				}
			}
			fresh := func() *stepRunner {
				s := &stepRunner{be: New(2), states: map[string]ops.Buffer{}}
				for name, st := range c.states {
					buf, _ := s.be.Alloc(st.dt, st.elems)
					s.states[name] = buf
				}
				return s
			}
			slice := func(from, to, pad int) map[string][]float64 {
				in := map[string][]float64{}
				for name, v := range c.fixed {
					in[name] = v
				}
				for name, v := range all {
					w := len(v) / seq
					in[name] = append(append([]float64(nil), v[from*w:to*w]...), make([]float64, pad*w)...)
				}
				return in
			}
			whole := fresh()
			want := whole.run(t, seq, 0, 0, c.build, slice(0, seq, 0))
			parts := fresh()
			var got [][]float64
			pos := 0
			for _, n := range []int{2, 1, 3, 1, 3, 1} { // the 3s run padded in a bucket of 4
				pad := 0
				if n == 3 {
					pad = 1
				}
				used := 0
				if pad > 0 {
					used = n
				}
				out := parts.run(t, n+pad, pos, used, c.build, slice(pos, pos+n, pad))
				for i := range out {
					w := len(out[i]) / (n + pad)
					if len(got) <= i {
						got = append(got, nil)
					}
					got[i] = append(got[i], out[i][:n*w]...)
					for j, x := range out[i][n*w:] {
						if x != 0 {
							t.Fatalf("output %d: padded row element %d is %v, want 0", i, j, x)
						}
					}
				}
				pos += n
			}
			if pos != seq {
				t.Fatalf("chunks cover %d rows of %d", pos, seq)
			}
			for i := range want {
				if err := closeTo(got[i], want[i]); err != nil {
					t.Errorf("output %d: chunked against whole: %v", i, err)
				}
			}
			for name := range c.states {
				if err := closeTo(snapshot(parts.states[name]), snapshot(whole.states[name])); err != nil {
					t.Errorf("state %s: chunked against whole: %v", name, err)
				}
			}
		})
	}
}

func randVals(n int, amp float64) []float64 {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(float32(amp * (2*r.Float64() - 1)))
	}
	return v
}

// closeTo compares with a relative tolerance of about f32 rounding.
func closeTo(got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(got[i] - want[i]); !(d <= 1e-5*(1+math.Abs(want[i]))) {
			return fmt.Errorf("element %d = %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

// TestFamilyRunErrors checks that corrupt data that reaches a family kernel at
// run time gives an error naming the problem, never a panic.
func TestFamilyRunErrors(t *testing.T) {
	be := New(1)
	for _, c := range optest.Cases() {
		if c.WantErr == "" || !isFamilyCase(c.Name) {
			continue
		}
		res, err := optest.Run(be, c, optest.Plain)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if res.Err == nil || strings.Contains(res.Err.Error(), "panicked") {
			t.Errorf("%s: error %v", c.Name, res.Err)
		}
	}
}

func isFamilyCase(name string) bool {
	for _, p := range []string{"qsa_", "expert_", "moe_", "ngram_", "ple_", "gdn_", "causal_", "block/gated_residual", "block/gdn", "block/moe", "block/qsa", "block/ple", "block/mtp_input"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
