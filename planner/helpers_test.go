package planner_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/planner"
)

// tiny is the shape of the nGPT-like test block.
type tiny struct {
	rows, hidden, heads, kvHeads, headDim, ffn, vocab int
	ring                                              bool
}

var tinyShape = tiny{rows: 3, hidden: 16, heads: 4, kvHeads: 2, headDim: 4, ffn: 24, vocab: 20}

const eps = 1e-6

// buildTiny builds one attention sub-layer, one SwiGLU sub-layer, a loop mix
// and a logits head with an elementwise tail, all through the ops helpers,
// as a model would.
func buildTiny(t testing.TB, c tiny) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("tiny")
	call := ops.Call(b)
	x := b.Input("x", graph.F32, c.rows, c.hidden)
	mat := func(name string, out, in int) *graph.Value { return b.Weight(name, graph.F32, out, in) }
	vec := func(name string, n int) *graph.Value { return b.Weight(name, graph.F32, n) }
	qs, kvs := c.heads*c.headDim, c.kvHeads*c.headDim
	var h *graph.Value
	func() {
		defer b.Push("attn")()
		q := ops.MatMul(b, x, mat("wq", qs, c.hidden))
		k := ops.MatMul(b, x, mat("wk", kvs, c.hidden))
		v := ops.MatMul(b, x, mat("wv", kvs, c.hidden))
		g := ops.MatMul(b, x, mat("wg", qs, c.hidden))
		nr := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: c.headDim, Rotary: c.headDim, Theta: 1e4}, Eps: eps}
		q = ops.NormRope(b, q, call, vec("sqk", qs), nr)
		k = ops.NormRope(b, k, call, nil, nr)
		sk := b.State("slot.k", graph.F32, graph.Dyn, kvs)
		sv := b.State("slot.v", graph.F32, graph.Dyn, kvs)
		ops.KVWrite(b, k, sk, call, ops.SlotAttrs{Ring: c.ring})
		ops.KVWrite(b, v, sv, call, ops.SlotAttrs{Ring: c.ring})
		y := ops.Attention(b, q, sk, sv, call, ops.AttentionAttrs{Heads: c.heads, KVHeads: c.kvHeads, HeadDim: c.headDim,
			Scale: float32(1 / math.Sqrt(float64(c.headDim))), Ring: c.ring})
		y = ops.GatedNorm(b, y, g, vec("sgate", qs), eps)
		h = ops.Slerp(b, x, ops.MatMul(b, y, mat("wo", c.hidden, qs)), vec("alpha1", c.hidden), eps)
	}()
	func() {
		defer b.Push("mlp")()
		gt := ops.MatMul(b, h, mat("wgate", c.ffn, c.hidden))
		up := ops.MatMul(b, h, mat("wup", c.ffn, c.hidden))
		y := ops.L2Norm(b, ops.SwiGLU(b, gt, up, vec("sg", c.ffn), vec("su", c.ffn)), 0, eps)
		h = ops.Slerp(b, h, ops.MatMul(b, y, mat("wdown", c.hidden, c.ffn)), vec("alpha2", c.hidden), eps)
	}()
	h = ops.Mix(b, h, x, eps)
	func() {
		defer b.Push("head")()
		lg := ops.MatMul(b, h, mat("lm", c.vocab, c.hidden))
		lg = ops.Scale(b, ops.Add(b, ops.Mul(b, lg, vec("lscale", c.vocab)), vec("bias", c.vocab)), 2)
		b.Output(b.Label(lg, "logits"))
	}()
	g, err := b.Graph()
	require.NoError(t, err)
	return g
}

// env holds the host data of every input, weight and state of a graph and
// binds fresh buffers from it for each run, so runs start from equal state.
type env struct {
	f32  map[string][]float32
	i32  map[string][]int32
	caps int // rows of a Dyn state
}

// newEnv fills every leaf of g with random data: unit-ish activations,
// weights scaled by 1/sqrt(in), states (KV rows) normalized per head so the
// attention stays well conditioned; the call record says pos, all rows.
func newEnv(g *graph.Graph, seed uint64, pos, capacity int) *env {
	rng := rand.New(rand.NewPCG(seed, 7))
	e := &env{f32: map[string][]float32{}, i32: map[string][]int32{}, caps: capacity}
	for _, v := range g.Values {
		if v.Kind == graph.Temp {
			continue
		}
		n := v.Shape.Elems()
		if n < 0 {
			n = capacity * graph.Shape(v.Shape[1:]).Elems()
		}
		switch {
		case v.Name == ops.CallName:
			rec := make([]int32, ops.CallLen)
			rec[ops.CallPos] = int32(pos)
			e.i32[v.Name] = rec
		case v.DType == graph.I32:
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = int32(rng.IntN(4))
			}
			e.i32[v.Name] = ids
		default:
			sd := 1.0
			if v.Kind == graph.Weight && len(v.Shape) == 2 {
				sd = 1 / math.Sqrt(float64(v.Shape[1]))
			}
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * sd)
			}
			if v.Kind == graph.Weight && len(v.Shape) == 1 {
				for i := range x {
					x[i] = float32(0.5 + 0.5*rng.Float64())
				}
			}
			e.f32[v.Name] = x
		}
	}
	return e
}

func f32Bytes(x []float32) []byte {
	out := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

func i32Bytes(x []int32) []byte {
	out := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return out
}

// bind makes fresh buffers on be for every leaf of g, by name.
func (e *env) bind(t testing.TB, be ops.Backend, g *graph.Graph) map[string]ops.Buffer {
	t.Helper()
	out := map[string]ops.Buffer{}
	for _, v := range g.Values {
		if v.Kind == graph.Temp {
			continue
		}
		var buf ops.Buffer
		var err error
		if x, ok := e.i32[v.Name]; ok {
			buf, err = be.Alloc(graph.I32, len(x))
			require.NoError(t, err)
			require.NoError(t, be.Write(buf, i32Bytes(x)))
		} else {
			x := e.f32[v.Name]
			buf, err = be.Alloc(graph.F32, len(x))
			require.NoError(t, err)
			require.NoError(t, be.Write(buf, f32Bytes(x)))
		}
		out[v.Name] = buf
	}
	return out
}

// byValue keys buffers bound by name by g's values.
func byValue(g *graph.Graph, byName map[string]ops.Buffer) map[*graph.Value]ops.Buffer {
	out := map[*graph.Value]ops.Buffer{}
	for _, v := range g.Values {
		if v.Kind != graph.Temp {
			out[v] = byName[v.Name]
		}
	}
	return out
}

// result is what a run leaves: the outputs and every state, by name.
type result struct {
	outputs [][]float32
	states  map[string][]float32
}

func copyOut(b ops.Buffer) []float32 { return append([]float32(nil), cpu.F32(b)...) }

// runPlanned plans g with opts, lowers it on the CPU and runs it once on
// fresh buffers from e.
func runPlanned(t testing.TB, g *graph.Graph, opts planner.Options, e *env) (result, planner.Report) {
	t.Helper()
	be := cpu.New(2)
	p, rep, err := planner.Plan(g, opts)
	require.NoError(t, err)
	bound := e.bind(t, be, g)
	pl, err := planner.Lower(p, be, byValue(g, bound))
	require.NoError(t, err)
	defer pl.Close()
	require.NoError(t, pl.Run())
	return collect(g, bound, pl.Outputs()), rep
}

// runReference runs g node by node with ops.Runner, each temporary in its
// own buffer: what a plan must reproduce.
func runReference(t testing.TB, g *graph.Graph, e *env) result {
	t.Helper()
	be := cpu.New(2)
	bound := e.bind(t, be, g)
	r, err := ops.NewRunner(be, g, byValue(g, bound))
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, r.Run())
	outs := make([]ops.Buffer, len(g.Outputs))
	for i, v := range g.Outputs {
		outs[i] = r.Buffer(v)
	}
	return collect(g, bound, outs)
}

func collect(g *graph.Graph, bound map[string]ops.Buffer, outs []ops.Buffer) result {
	r := result{states: map[string][]float32{}}
	for _, b := range outs {
		r.outputs = append(r.outputs, copyOut(b))
	}
	for _, v := range g.OfKind(graph.State) {
		r.states[v.Name] = copyOut(bound[v.Name])
	}
	return r
}

// maxRelDiff is max |a − b| over max(1, max |b|), over outputs and states.
func maxRelDiff(t testing.TB, a, b result) float64 {
	t.Helper()
	require.Equal(t, len(b.outputs), len(a.outputs))
	d := 0.0
	cmp := func(x, y []float32) {
		require.Equal(t, len(y), len(x))
		scale := 1.0
		for _, v := range y {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		for i := range x {
			if math.IsNaN(float64(x[i])) != math.IsNaN(float64(y[i])) {
				d = math.Inf(1)
				return
			}
			d = math.Max(d, math.Abs(float64(x[i])-float64(y[i]))/scale)
		}
	}
	for i := range b.outputs {
		cmp(a.outputs[i], b.outputs[i])
	}
	for n, s := range b.states {
		cmp(a.states[n], s)
	}
	return d
}

// requireSame checks two results bit for bit.
func requireSame(t testing.TB, a, b result, msg string) {
	t.Helper()
	require.Equal(t, len(b.outputs), len(a.outputs), msg)
	for i := range b.outputs {
		require.Equal(t, bits(b.outputs[i]), bits(a.outputs[i]), "%s: output %d", msg, i)
	}
	for n, s := range b.states {
		require.Equal(t, bits(s), bits(a.states[n]), "%s: state %s", msg, n)
	}
}

func bits(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

var (
	fused   = planner.Options{Fuse: true}
	unfused = planner.Options{Fuse: false}
)
