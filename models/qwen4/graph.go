package qwen4

import (
	"fmt"
	"math"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
)

// Stage is which graph a key builds.
type Stage int

const (
	// Forward is the model over a chunk of rows: embeddings, every layer and
	// the head.
	Forward Stage = iota
	// Draft is the MTP head over a chunk of rows: each row pairs the main
	// model's final hyper-state at a position with the token after it.
	Draft
	// Settle advances the recurrent states (each GDN layer's conv ring and
	// state, each PLE layer's history and conv ring) over the first rows
	// of a speculation window, from what the window's Forward taped: the
	// window's refused rows are taken back without running the accepted
	// ones through the model again. It has no outputs.
	Settle
)

// String gives the stage's lower-case name.
func (s Stage) String() string {
	switch s {
	case Draft:
		return "mtp"
	case Settle:
		return "settle"
	}
	return "forward"
}

// Key identifies one graph: plans are built once per key.
type Key struct {
	Stage Stage
	Want  lm.Want
	Rows  int
	// Hidden adds the final hyper-state of every row [rows, C·H] as an
	// output after the logits (the MTP head's input; a Draft graph always
	// has it).
	Hidden bool
	// Tape, on a Forward, also stores what Settle needs of every row (each
	// GDN layer's qkv, a and b projections, each PLE layer's conv input)
	// in tape states of Rows rows.
	Tape bool
	// TapeRows is, on a Settle, the rows of the window whose tape it reads;
	// it settles the first Rows of them.
	TapeRows int
}

// String writes the key as dumps and logs show it.
func (k Key) String() string {
	s := fmt.Sprintf("%s/want=%s/rows=%d", k.Stage, k.Want, k.Rows)
	if k.Hidden {
		s += "/hidden"
	}
	if k.Tape {
		s += "/tape"
	}
	if k.Stage == Settle {
		s += fmt.Sprintf("/of=%d", k.TapeRows)
	}
	return s
}

// tapeRows is the rows of the tape states a key's graph declares (0: none).
func (k Key) tapeRows() int {
	switch {
	case k.Stage == Settle:
		return k.TapeRows
	case k.Tape && k.Stage == Forward:
		return k.Rows
	}
	return 0
}

// InputHidden is the input of the Draft rows' main hyper-states, f32
// [rows, C·H] (the rows' token ids are lm.InputIDs).
const InputHidden = "mtp.hidden"

// StateName names a state of a layer: the layer's index, or "mtp" for the
// draft head's layer, and the part:
//
//	GDN  conv (the conv ring [K−1, conv dim]), state (S [nv, dk, dv])
//	QSA  k, v (KV slots [cap, kv·hd]), kraw (raw indexer keys [cap, idim]),
//	     blocks (block keys [cap/cr+1, idim])
//	PLE  hist (the last n−1 ids, i32), conv (the conv ring [(K−1)·n, C·H])
func StateName(kind, layer, part string) string { return kind + "." + layer + "." + part }

// TapeName is the name of layer li's tape state part (qkv, a, b for a GDN
// layer; ple for a PLE layer's conv input).
func TapeName(li int, part string) string { return StateName("tape", layerTag(li), part) }

// stateSpec says how a session keeps the state of name (lm.Graphs.State):
// the GDN states and conv rings and the PLE histories run forward only
// (lm.Recurrent), the QSA caches are indexed by position (lm.Slot, a block
// key per Block positions), the tapes carry a window's rows to its Settle
// (lm.Scratch, a tape per window rows).
func (c *Config) stateSpec(name string) (lm.StateSpec, error) {
	kind, rest, _ := strings.Cut(name, ".")
	_, part, _ := strings.Cut(rest, ".")
	switch kind + "." + part {
	case "gdn.conv", "gdn.state", "ple.hist", "ple.conv":
		return lm.StateSpec{Kind: lm.Recurrent}, nil
	case "qsa.k", "qsa.v", "qsa.kraw":
		return lm.StateSpec{Kind: lm.Slot}, nil
	case "qsa.blocks":
		return lm.StateSpec{Kind: lm.Slot, PerRow: c.Block}, nil
	case "tape.qkv", "tape.a", "tape.b", "tape.ple":
		return lm.StateSpec{Kind: lm.Scratch}, nil
	}
	return lm.StateSpec{}, fmt.Errorf("qwen4: no state %s", name)
}

func layerTag(li int) string {
	if li < 0 {
		return "mtp"
	}
	return fmt.Sprint(li)
}

// Weights describes the stored weights a graph declares. A Model is one;
// nil builds from the config alone (bf16 weights, computed PLE constants,
// the tables in ple_shards shards), for dumps.
type Weights interface {
	// Stored is how the weights are stored: each one's dtype, and the
	// format of the quantized projections (lm.Loaded.Stored of a Model).
	Stored() lm.Stored
	// PLEHash gives PLE layer li's hash attributes.
	PLEHash(li int) (ops.PLEHashAttrs, bool)
	// PLEShards gives PLE layer li's table shards: names and rows.
	PLEShards(li int) (names []string, rows []int)
}

// builder holds what building one graph needs.
type builder struct {
	c    *Config
	b    *graph.Builder
	w    Weights
	st   lm.Stored // how the weights are stored
	call *graph.Value
	rows int
	eps  float32
	// tape is the rows of the tape states (0: the graph has none); a
	// Forward stores into them, a Settle reads them.
	tape int
}

// tapeState declares layer li's tape part of tape rows of width w.
func (g *builder) tapeState(li int, part string, w int) *graph.Value {
	return g.b.State(TapeName(li, part), graph.F32, g.tape, w)
}

// taped stores x into layer li's tape part when the graph tapes (a Forward
// with Key.Tape).
func (g *builder) taped(li int, part string, x *graph.Value) {
	if g.tape > 0 {
		ops.Store(g.b, x, g.tapeState(li, part, x.Shape.Last()))
	}
}

// weight declares a stored weight.
func (g *builder) weight(name string, shape ...int) *graph.Value {
	dt := g.st.DTypeOf(name)
	if dt == graph.Invalid {
		g.b.Fail(fmt.Errorf("weight %s: not in the model", name))
	}
	return g.b.Weight(name, dt, shape...)
}

// state declares a state of the model's f32 activations.
func (g *builder) state(kind string, li int, part string, shape ...int) *graph.Value {
	return g.b.State(StateName(kind, layerTag(li), part), graph.F32, shape...)
}

func (g *builder) rope(headDim int) ops.RopeAttrs {
	return ops.RopeAttrs{HeadDim: headDim, Rotary: g.c.Rotary, Theta: g.c.Theta}
}

// residualIn is a gated residual's first half: the block input u and the
// normed hyper-state xn (which the inject logits read).
func (g *builder) residualIn(pre string, x *graph.Value) (u, xn *graph.Value) {
	c, b := g.c, g.b
	ch := c.Streams * c.Hidden
	xn = ops.RMSNorm(b, x, g.weight(pre+"hc_norm.weight", ch), c.Hidden, g.eps)
	t := ops.SiLU(b, ops.Scale(b, ops.MatMul(b, xn, g.weight(pre+"input_mix_weight_down.weight", c.Rank, ch)), 1/float32(c.Streams)))
	u = ops.HCMix(b, xn, ops.MatMul(b, t, g.weight(pre+"input_mix_weight_up.weight", ch, c.Rank)), c.Streams)
	return b.Label(u, "u"), xn
}

// residualOut adds the block output y into every stream: X_c += 2σ(l_c/C)·y.
func (g *builder) residualOut(pre string, x, xn, y *graph.Value) *graph.Value {
	c := g.c
	l := ops.MatMul(g.b, xn, g.weight(pre+"block_inject_weight.weight", c.Streams, c.Streams*c.Hidden))
	return ops.HCInject(g.b, x, y, l, c.Streams)
}

// gdn builds Gated DeltaNet layer li on the block input u.
func (g *builder) gdn(li int, u *graph.Value) *graph.Value {
	c, b := g.c, g.b
	pre := LayerPrefix(li) + "linear_attn."
	h, cd, vd := c.Hidden, c.ConvDim(), c.ValueHeads*c.ValueDim
	ring := g.state("gdn", li, "conv", c.ConvKernel-1, cd)
	s := g.state("gdn", li, "state", c.ValueHeads, c.KeyDim, c.ValueDim)
	qkv := b.Label(g.linear(u, pre+"in_proj_qkv.weight", cd, h), "qkv")
	mixed := ops.CausalConv(b, qkv, g.weight(pre+"conv1d.weight", cd, 1, c.ConvKernel), ring, g.call, ops.ConvAttrs{Dilation: 1, Act: ops.ActSiLU})
	q, k, v := ops.GDNPrep(b, mixed, ops.GDNPrepAttrs{KeyHeads: c.KeyHeads, KeyDim: c.KeyDim, ValueHeads: c.ValueHeads, ValueDim: c.ValueDim, Eps: GDNEps})
	a := ops.MatMul(b, u, g.weight(pre+"in_proj_a.weight", c.ValueHeads, h))
	bl := ops.MatMul(b, u, g.weight(pre+"in_proj_b.weight", c.ValueHeads, h))
	g.taped(li, "qkv", qkv)
	g.taped(li, "a", a)
	g.taped(li, "b", bl)
	decay, beta := ops.GDNGates(b, a, bl, g.weight(pre+"A_log", c.ValueHeads), g.weight(pre+"dt_bias", c.ValueHeads))
	o := ops.GDNScan(b, q, k, v, decay, beta, s, g.call)
	z := b.Label(g.linear(u, pre+"in_proj_z.weight", vd, h), "z")
	y := ops.GatedRMSNorm(b, o, z, g.weight(pre+"norm.weight", c.ValueDim), ops.GatedRMSNormAttrs{Group: c.ValueDim, Eps: g.eps, Act: c.OutGate})
	return b.Label(g.linear(y, pre+"out_proj.weight", h, vd), "gdn_out")
}

// qsa builds a QSA layer (li < 0: the MTP head's) on the block input u.
func (g *builder) qsa(li int, pre string, u *graph.Value) *graph.Value {
	c, b := g.c, g.b
	h, hd, id := c.Hidden, c.HeadDim, c.IndexDim
	kw := c.KVHeads * hd
	K := g.state("qsa", li, "k", graph.Dyn, kw)
	V := g.state("qsa", li, "v", graph.Dyn, kw)
	kraw := g.state("qsa", li, "kraw", graph.Dyn, id)
	keys := g.state("qsa", li, "blocks", graph.Dyn, id)

	qg := ops.Split(b, g.linear(u, pre+"q_proj.weight", 2*c.Heads*hd, h), c.Heads, hd, hd)
	q := ops.Rope(b, ops.RMSNorm(b, qg[0], g.weight(pre+"q_norm.weight", hd), hd, g.eps), g.call, g.rope(hd))
	k := ops.RMSNorm(b, g.linear(u, pre+"k_proj.weight", kw, h), g.weight(pre+"k_norm.weight", hd), hd, g.eps)
	k = ops.Rope(b, k, g.call, g.rope(hd))
	v := g.linear(u, pre+"v_proj.weight", kw, h)
	ops.KVWrite(b, k, K, g.call, ops.SlotAttrs{})
	ops.KVWrite(b, v, V, g.call, ops.SlotAttrs{})

	pop := b.Push("indexer")
	ik := ops.Split(b, g.linear(u, pre+"indexer.index_qk_proj.weight", (c.IndexHeads+1)*id, h), 1, c.IndexHeads*id, id)
	qi := ops.Rope(b, ops.RMSNorm(b, ik[0], g.weight(pre+"indexer.q_layernorm.weight", id), id, g.eps), g.call, g.rope(id))
	ops.QSABlockKeys(b, ik[1], g.weight(pre+"indexer.k_layernorm.weight", id), kraw, keys, g.call,
		ops.BlockKeyAttrs{Block: c.Block, Rope: g.rope(id), Eps: g.eps})
	sel := b.Label(ops.QSASelect(b, qi, keys, g.call, ops.SelectAttrs{Heads: c.IndexHeads, Block: c.Block, Keep: c.Keep()}), "selected")
	pop()

	y := ops.QSAAttention(b, q, K, V, sel, g.call, ops.SparseAttentionAttrs{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: hd, Block: c.Block,
		Scale: float32(1 / math.Sqrt(float64(hd)))})
	y = ops.GateMerge(b, y, qg[1])
	return b.Label(g.linear(y, pre+"o_proj.weight", h, c.Heads*hd), "attn_out")
}

// moe builds the routed experts and the gated shared expert on u.
func (g *builder) moe(pre string, u *graph.Value) *graph.Value {
	c, b := g.c, g.b
	h, f, sf := c.Hidden, c.ExpertFFN, c.SharedFFN
	ids, w := ops.MoERoute(b, ops.MatMul(b, u, g.weight(pre+"mlp.gate.weight", c.Experts, h)), c.TopK, c.NormTopK)
	units := ops.SiLUGLU(b, g.experts(u, ids, pre+ExpertsGateUp, 2*f, h))
	y := g.experts(units, ids, pre+ExpertsDown, h, f)
	gt := g.linear(u, pre+"mlp.shared_expert.gate_proj.weight", sf, h)
	up := g.linear(u, pre+"mlp.shared_expert.up_proj.weight", sf, h)
	shared := g.linear(ops.Mul(b, ops.SiLU(b, gt), up), pre+"mlp.shared_expert.down_proj.weight", h, sf)
	sg := ops.MatMul(b, u, g.weight(pre+"mlp.shared_expert_gate.weight", 1, h))
	return b.Label(ops.MoECombine(b, y, w, shared, sg), "moe_out")
}

// ple builds layer li's PLE block: X + gv + silu(conv(rmsnorm(gv))).
func (g *builder) ple(li int, x, ids *graph.Value) *graph.Value {
	c, b := g.c, g.b
	defer b.Push("ple")()
	pre := LayerPrefix(li) + "ple."
	h, ch := c.Hidden, c.Streams*c.Hidden
	at, ok := g.w.PLEHash(li)
	if !ok {
		b.Fail(fmt.Errorf("layer %d: no PLE hash constants", li))
		return x
	}
	hist := g.b.State(StateName("ple", layerTag(li), "hist"), graph.I32, c.NGram-1)
	ring := g.state("ple", li, "conv", (c.PLEConvKernel-1)*c.NGram, ch)
	names, rows := g.w.PLEShards(li)
	width := c.PLEDim / c.PLEHeads()
	shards := make([]*graph.Value, len(names))
	for i, n := range names {
		shards[i] = g.weight(n, rows[i], width)
	}
	e := b.Label(ops.NGramEmbed(b, ops.PLEHash(b, ids, hist, g.call, at), shards...), "ngram")
	kn := ops.RMSNorm(b, g.linear(e, pre+"key_proj.weight", ch, c.PLEDim), g.weight(pre+"norm_key.weight", ch), h, g.eps)
	qn := ops.RMSNorm(b, x, g.weight(pre+"norm_query.weight", ch), h, g.eps)
	gv := ops.PLEGate(b, kn, qn, g.linear(e, pre+"value_proj.weight", h, c.PLEDim), c.Streams)
	gn := ops.RMSNorm(b, gv, g.weight(pre+"norm_conv.weight", ch), h, g.eps)
	g.taped(li, "ple", gn)
	cv := ops.CausalConv(b, gn, g.weight(pre+"conv1d.weight", ch, 1, c.PLEConvKernel), ring, g.call, ops.ConvAttrs{Dilation: c.NGram, Act: ops.ActSiLU})
	return ops.Add(b, ops.Add(b, x, gv), cv)
}

// layer builds decoder layer li (MTP head: li < 0, a QSA layer without PLE).
func (g *builder) layer(li int, x, ids *graph.Value) *graph.Value {
	c, b := g.c, g.b
	pre, kind := MTPPrefix, QSA
	if li < 0 {
		defer b.Push("mtp")()
	} else {
		pre, kind = LayerPrefix(li), c.Layers[li]
		defer b.Push("layer %d", li)()
		if c.HasPLE(li) {
			x = g.ple(li, x, ids)
		}
	}
	func() {
		defer b.Push("%s", kind)()
		u, xn := g.residualIn(pre+"attn_hyper_connection.", x)
		var y *graph.Value
		if kind == GDN {
			y = g.gdn(li, u)
		} else {
			y = g.qsa(li, pre+"self_attn.", u)
		}
		x = g.residualOut(pre+"attn_hyper_connection.", x, xn, y)
	}()
	var xn, y *graph.Value
	func() {
		defer b.Push("moe")()
		var u *graph.Value
		u, xn = g.residualIn(pre+"mlp_hyper_connection.", x)
		y = g.moe(pre, u)
	}()
	return b.Label(g.residualOut(pre+"mlp_hyper_connection.", x, xn, y), "out") // "layer N / out"
}

// head mixes the streams of the wanted rows with the final gated residual
// (mixer, no inject) and applies lm_head.
func (g *builder) head(mixer string, x *graph.Value, want lm.Want) *graph.Value {
	c, b := g.c, g.b
	defer b.Push("head")()
	if want == lm.WantLast && g.rows > 1 {
		x = ops.LastRow(b, x, g.call) // the last row in use: a chunk may run on a bucket's plan
	}
	u, _ := g.residualIn(mixer, x)
	return b.Label(ops.MatMul(b, u, g.weight("lm_head.weight", c.Vocab, c.Hidden)), "logits")
}

// Build builds the graph of a key: the forward of k.Rows rows, or the MTP
// head's. w describes the stored weights (nil: from the config alone).
// The graph's outputs are the logits (unless lm.WantNone) and then, with
// k.Hidden or for Draft, the final hyper-state of every row.
func Build(c *Config, k Key, w Weights) (*graph.Graph, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if k.Rows < 1 {
		return nil, fmt.Errorf("qwen4: %d rows: want at least 1", k.Rows)
	}
	if err := k.Want.Check(); err != nil {
		return nil, fmt.Errorf("qwen4: %w", err)
	}
	if w == nil {
		w = declaring{configModel(*c), lm.Stored{DType: func(string) graph.DType { return graph.BF16 }}}
	}
	if k.Stage == Settle && (k.TapeRows < k.Rows || k.Want != lm.WantNone || k.Hidden || k.Tape) {
		return nil, fmt.Errorf("qwen4: settle %d rows of a tape of %d (want none, no hidden, no tape)", k.Rows, k.TapeRows)
	}
	if k.Tape && k.Stage != Forward {
		return nil, fmt.Errorf("qwen4: a %s graph has no tape", k.Stage)
	}
	b := graph.NewBuilder("qwen4/" + k.String())
	g := &builder{c: c, b: b, w: w, st: w.Stored(), rows: k.Rows, eps: float32(c.Eps), tape: k.tapeRows()}
	g.call = ops.Call(b)
	ids := b.Input(lm.InputIDs, graph.I32, k.Rows)
	embed := g.weight("model.embed_tokens.weight", c.Vocab, c.Hidden)
	var x *graph.Value
	mixer := "model.hyper_connection_mixer."
	switch k.Stage {
	case Forward:
		x = ops.HCExpand(b, b.Label(ops.Embed(b, embed, ids), "embed"), c.Streams)
		for li := range c.Layers {
			x = g.layer(li, x, ids)
		}
	case Draft:
		if c.MTPLayers == 0 {
			return nil, fmt.Errorf("qwen4: the config has no MTP head (mtp_num_hidden_layers 0)")
		}
		x = g.mtpInput(b.Input(InputHidden, graph.F32, k.Rows, c.Streams*c.Hidden), ops.Embed(b, embed, ids))
		x = g.layer(-1, x, ids)
		mixer = "mtp.hyper_connection_mixer."
	case Settle:
		for li := range c.Layers {
			g.settle(li, ids)
		}
		return b.Graph()
	default:
		return nil, fmt.Errorf("qwen4: unknown stage %d", int(k.Stage))
	}
	if k.Want != lm.WantNone {
		b.Output(g.head(mixer, x, k.Want))
	}
	if k.Hidden || k.Stage == Draft {
		b.Output(x) // the last layer's "out": one name with or without this output
	}
	return b.Graph()
}

// settle advances layer li's recurrent states over the graph's rows from
// the tape, as the layer's Forward did: the PLE history (from the ids) and
// conv ring, the GDN conv ring and state.
func (g *builder) settle(li int, ids *graph.Value) {
	c, b := g.c, g.b
	defer b.Push("layer %d", li)()
	rows := func(part string, w int) *graph.Value { return ops.SliceRows(b, g.tapeState(li, part, w), 0, g.rows) }
	if c.HasPLE(li) {
		at, ok := g.w.PLEHash(li)
		if !ok {
			b.Fail(fmt.Errorf("layer %d: no PLE hash constants", li))
			return
		}
		ch := c.Streams * c.Hidden
		hist := b.State(StateName("ple", layerTag(li), "hist"), graph.I32, c.NGram-1)
		ops.PLEHash(b, ids, hist, g.call, at)
		ring := g.state("ple", li, "conv", (c.PLEConvKernel-1)*c.NGram, ch)
		ops.CausalConv(b, rows("ple", ch), g.weight(LayerPrefix(li)+"ple.conv1d.weight", ch, 1, c.PLEConvKernel), ring, g.call,
			ops.ConvAttrs{Dilation: c.NGram, Act: ops.ActSiLU})
	}
	if c.Layers[li] != GDN {
		return
	}
	pre := LayerPrefix(li) + "linear_attn."
	cd, nv := c.ConvDim(), c.ValueHeads
	ring := g.state("gdn", li, "conv", c.ConvKernel-1, cd)
	s := g.state("gdn", li, "state", c.ValueHeads, c.KeyDim, c.ValueDim)
	mixed := ops.CausalConv(b, rows("qkv", cd), g.weight(pre+"conv1d.weight", cd, 1, c.ConvKernel), ring, g.call, ops.ConvAttrs{Dilation: 1, Act: ops.ActSiLU})
	q, k, v := ops.GDNPrep(b, mixed, ops.GDNPrepAttrs{KeyHeads: c.KeyHeads, KeyDim: c.KeyDim, ValueHeads: c.ValueHeads, ValueDim: c.ValueDim, Eps: GDNEps})
	decay, beta := ops.GDNGates(b, rows("a", nv), rows("b", nv), g.weight(pre+"A_log", nv), g.weight(pre+"dt_bias", nv))
	ops.GDNScan(b, q, k, v, decay, beta, s, g.call)
}

// mtpInput is the MTP head's hyper-state from the main model's final
// hyper-state hs and the next token's embedding e:
// X_c = fc_hidden(rmsnorm(hs; whole row)_c) + fc_embedding(rmsnorm(e)).
func (g *builder) mtpInput(hs, e *graph.Value) *graph.Value {
	c, b := g.c, g.b
	defer b.Push("mtp input")()
	h, ch := c.Hidden, c.Streams*c.Hidden
	en := ops.RMSNorm(b, e, g.weight("mtp.pre_fc_norm_embedding.weight", h), 0, g.eps)
	ef := g.linear(en, "mtp.fc_embedding.weight", h, h)
	hn := ops.RMSNorm(b, hs, g.weight("mtp.pre_fc_norm_hidden.weight", ch), 0, g.eps)
	hf := g.linear(ops.Reshape(b, hn, g.rows*c.Streams, h), "mtp.fc_hidden.weight", h, h)
	return ops.Add(b, ops.Reshape(b, hf, g.rows, ch), ops.HCExpand(b, ef, c.Streams))
}
