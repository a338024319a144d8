package dory

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
)

// Stage is a part of one forward. Without an early-exit gate a call runs All;
// with a gate a one-row call runs First (or FirstRead), decides on the host,
// and then runs Read, SecondRead or SecondFresh.
type Stage int

// The stages of a forward.
const (
	// All: the input block, every loop of the recurrent block, the output block, the head.
	All Stage = iota
	// First: the input block and the first loop; stores the block input and loop state.
	First
	// FirstRead: First, then the output block and the head on the first loop's state.
	FirstRead
	// Read: the output block and the head on the state First stored.
	Read
	// SecondRead: the second loop after FirstRead, then the output block again
	// (rewriting this position's rows) and the head.
	SecondRead
	// SecondFresh: the second loop after First, then the output block and the head.
	SecondFresh
)

var stageNames = [...]string{"all", "first", "firstread", "read", "secondread", "secondfresh"}

// String gives the stage's lower-case name, as `reel dump --stage` takes it.
func (s Stage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return fmt.Sprintf("stage(%d)", int(s))
}

// ParseStage reads a stage name.
func ParseStage(s string) (Stage, error) {
	for i, n := range stageNames {
		if n == s {
			return Stage(i), nil
		}
	}
	return 0, fmt.Errorf("unknown stage %q: want one of %v", s, stageNames)
}

// Key identifies one stage graph: plans are built once per key.
type Key struct {
	Stage Stage
	Loops int
	Want  lm.Want
	Rows  int
}

// String writes the key as dumps and logs show it.
func (k Key) String() string {
	return fmt.Sprintf("%s/loops=%d/want=%s/rows=%d", k.Stage, k.Loops, k.Want, k.Rows)
}

// Names of the states a stage graph reads and writes (its input is
// lm.InputIDs).
const (
	StateInput = "carry.input" // the input block's output, kept between stages
	StateLoop  = "carry.state" // the recurrent block's state, kept between stages
)

func layerName(i int) string { return fmt.Sprintf("backbone.layers.%d", i) }

// SlotName is the state name of sub-layer li's KV slot for loop slot s, k or v.
func SlotName(li, s int, kv string) string { return fmt.Sprintf("kv.%d.%d.%s", li, s, kv) }

// SlotIndex is the slot an attention sub-layer uses in a loop: per_loop
// recurrent layers have one per loop, every other layer one.
func (c *Config) SlotIndex(li, loop int) int {
	if c.KV == PerLoop && c.Block(li) == 1 {
		return loop
	}
	return 0
}

// builder holds what building one stage graph needs.
type builder struct {
	c    *Config
	b    *graph.Builder
	st   lm.Stored // how the matrices are stored
	call *graph.Value
	rows int
}

// matrix declares a matrix read whole (the embedding, the head), as stored.
func (g *builder) matrix(name string, out, in int) *graph.Value {
	return g.st.Matrix(g.b, name, out, in)
}

// linear is x·Wᵀ for the projection W [out, in] as stored, quantized or not.
func (g *builder) linear(x *graph.Value, name string, out, in int) *graph.Value {
	return g.st.Linear(g.b, x, name, out, in)
}

func (g *builder) vector(name string, n int) *graph.Value {
	return g.b.Weight(name, graph.F32, n)
}

// slot declares a KV slot state: rows of nk·hd by position, capacity bound later.
func (g *builder) slot(li, s int, kv string) *graph.Value {
	return g.b.State(SlotName(li, s, kv), graph.F32, graph.Dyn, g.c.KVHeads*g.c.HeadDim)
}

// attention builds sub-layer li on h, using slot index s.
func (g *builder) attention(li, s int, h *graph.Value) *graph.Value {
	c, b := g.c, g.b
	p, m := layerName(li), layerName(li)+".mixer"
	qs, kvs := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	q := b.Label(g.linear(h, m+".q_proj.weight", qs, c.Hidden), "q")
	k := b.Label(g.linear(h, m+".k_proj.weight", kvs, c.Hidden), "k")
	v := b.Label(g.linear(h, m+".v_proj.weight", kvs, c.Hidden), "v")
	gate := b.Label(g.linear(h, m+".g_proj.weight", qs, c.Hidden), "g")
	prof := c.Profiles[c.LayerProfile[li]-1]
	nr := ops.NormRopeAttrs{Rope: ops.RopeAttrs{HeadDim: c.HeadDim, Rotary: prof.Rotary, Theta: prof.Theta}, Eps: Eps}
	q = ops.NormRope(b, q, g.call, g.vector(m+".sqk", qs), nr)
	k = ops.NormRope(b, k, g.call, nil, nr)
	ring := c.IsSliding(li)
	sk, sv := g.slot(li, s, "k"), g.slot(li, s, "v")
	ops.KVWrite(b, k, sk, g.call, ops.SlotAttrs{Ring: ring})
	ops.KVWrite(b, v, sv, g.call, ops.SlotAttrs{Ring: ring})
	window := 0
	if ring {
		window = c.Window
	}
	y := ops.Attention(b, q, sk, sv, g.call, ops.AttentionAttrs{
		Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Window: window,
		Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), Ring: ring,
	})
	y = ops.GatedNorm(b, y, gate, g.vector(m+".s_gate", qs), Eps)
	out := b.Label(g.linear(y, m+".o_proj.weight", c.Hidden, qs), "attn_out")
	return ops.Slerp(b, h, out, g.vector(p+".attn_alpha", c.Hidden), Eps)
}

// mlp builds SwiGLU sub-layer li on h.
func (g *builder) mlp(li int, h *graph.Value) *graph.Value {
	c, b := g.c, g.b
	p, m := layerName(li), layerName(li)+".mixer"
	gt := g.linear(h, m+".gate_proj.weight", c.FFN, c.Hidden)
	up := g.linear(h, m+".up_proj.weight", c.FFN, c.Hidden)
	y := ops.SwiGLU(b, gt, up, g.vector(m+".suv_gate", c.FFN), g.vector(m+".suv_up", c.FFN))
	y = ops.L2Norm(b, y, 0, Eps)
	out := b.Label(g.linear(y, m+".down_proj.weight", c.Hidden, c.FFN), "mlp_out")
	return ops.Slerp(b, h, out, g.vector(p+".mlp_alpha", c.Hidden), Eps)
}

// sublayer builds sub-layer li in loop `loop`.
func (g *builder) sublayer(li, loop int, h *graph.Value) *graph.Value {
	kind := "mlp"
	if g.c.IsAttention(li) {
		kind = "attn"
	}
	defer g.b.Push("layer %d %s", li, kind)()
	if kind == "attn" {
		return g.b.Label(g.attention(li, g.c.SlotIndex(li, loop), h), "out")
	}
	return g.b.Label(g.mlp(li, h), "out")
}

// block runs sub-layers [from, to) in loop `loop`.
func (g *builder) block(from, to, loop int, h *graph.Value) *graph.Value {
	for li := from; li < to; li++ {
		h = g.sublayer(li, loop, h)
	}
	return h
}

// recurrent runs one pass of the recurrent block from state and input and
// returns the new state n(h).
func (g *builder) recurrent(loop int, state, input *graph.Value) *graph.Value {
	c, b := g.c, g.b
	defer b.Push("loop %d", loop)()
	h := ops.Mix(b, state, input, Eps)
	h = g.block(c.NIn, c.NIn+c.NRec, loop, h)
	return b.Label(ops.L2Norm(b, h, 0, Eps), "out")
}

// head computes the wanted rows' logits: H·h ⊙ logit_scale/σ₀.
func (g *builder) head(h *graph.Value, want lm.Want) *graph.Value {
	c, b := g.c, g.b
	defer b.Push("head")()
	if want == lm.WantLast && g.rows > 1 {
		h = ops.LastRow(b, h, g.call) // the last row in use: a chunk may run on a bucket's plan
	}
	logits := ops.MatMul(b, h, g.matrix("lm_head.weight", c.Vocab, c.Hidden))
	return b.Label(ops.Mul(b, logits, g.vector("lm_head.logit_scale", c.Vocab)), "logits")
}

// BuildStage builds the graph of one stage over weights stored as st says
// (the zero Stored: every matrix in bf16, as the released checkpoint;
// lm.Loaded.Stored of a Model).
func BuildStage(c *Config, k Key, st lm.Stored) (*graph.Graph, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if k.Loops < 1 || k.Loops > MaxLoops {
		return nil, fmt.Errorf("dory: %d loops: want 1 to %d", k.Loops, MaxLoops)
	}
	if k.Rows < 1 {
		return nil, fmt.Errorf("dory: %d rows: want at least 1", k.Rows)
	}
	if k.Stage != All && k.Rows != 1 {
		return nil, fmt.Errorf("dory: stage %s runs one row, not %d", k.Stage, k.Rows)
	}
	if k.Stage != All && k.Stage != First && k.Want == lm.WantNone {
		return nil, fmt.Errorf("dory: stage %s reads out logits: want last or all", k.Stage)
	}
	b := graph.NewBuilder("dory/" + k.String())
	g := &builder{c: c, b: b, st: st, rows: k.Rows}
	g.call = ops.Call(b)
	carried := func() (input, state *graph.Value) {
		return b.State(StateInput, graph.F32, k.Rows, c.Hidden), b.State(StateLoop, graph.F32, k.Rows, c.Hidden)
	}
	var h *graph.Value
	switch k.Stage {
	case All, First, FirstRead:
		ids := b.Input(lm.InputIDs, graph.I32, k.Rows)
		h = b.Label(ops.Embed(b, g.matrix("backbone.embeddings.weight", c.Vocab, c.Hidden), ids), "embed")
		func() {
			defer b.Push("input block")()
			h = g.block(0, c.NIn, 0, h)
		}()
		input, state := h, h
		passes := k.Loops
		if k.Stage != All {
			passes = 1
		}
		for i := 0; i < passes; i++ {
			state = g.recurrent(i, state, input)
		}
		if k.Stage != All {
			si, ss := carried()
			ops.Store(b, input, si)
			ops.Store(b, state, ss)
		}
		h = state
	case Read:
		_, h = carried()
	case SecondRead, SecondFresh:
		input, state := carried()
		h = g.recurrent(1, state, input)
	default:
		return nil, fmt.Errorf("dory: unknown stage %d", int(k.Stage))
	}
	if k.Stage == First {
		return b.Graph()
	}
	func() {
		defer b.Push("output block")()
		h = g.block(c.NIn+c.NRec, c.Layers(), 0, h)
	}()
	if k.Want != lm.WantNone {
		b.Output(g.head(h, k.Want))
	}
	return b.Graph()
}
