package cpu_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/weights"
)

// TestQwenGolden checks that the Qwen4 ops, put together as QWEN4.md's
// forward pass, give the logits Hugging Face transformers gave for the tiny
// checkpoints in testdata/qwen4: a whole sequence in one run, and the first
// half as a prefill followed by one token per run (the recurrent states,
// rings and caches carried between runs). The graph here is a plain sketch
// for the ops' sake; the model proper lives in models/qwen4.
func TestQwenGolden(t *testing.T) {
	dirs, _ := filepath.Glob("../../testdata/qwen4/qwen4-tiny-*")
	if len(dirs) == 0 {
		t.Skip("no tiny Qwen4 checkpoints in testdata/qwen4")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) { goldenCheckpoint(t, dir) })
	}
}

// qcfg is the part of config.json the sketch reads.
type qcfg struct {
	Hidden       int      `json:"hidden_size"`
	Vocab        int      `json:"vocab_size"`
	EOS          int      `json:"eos_token_id"`
	Eps          float64  `json:"rms_norm_eps"`
	HC           int      `json:"hc_count"`
	LayerTypes   []string `json:"layer_types"`
	NK           int      `json:"linear_num_key_heads"`
	NV           int      `json:"linear_num_value_heads"`
	DK           int      `json:"linear_key_head_dim"`
	DV           int      `json:"linear_value_head_dim"`
	ConvK        int      `json:"linear_conv_kernel_dim"`
	OutGate      string   `json:"output_gate_type"`
	Heads        int      `json:"num_attention_heads"`
	KVHeads      int      `json:"num_key_value_heads"`
	HeadDim      int      `json:"head_dim"`
	IHeads       int      `json:"indexer_n_heads"`
	IDim         int      `json:"indexer_head_dim"`
	Budget       int      `json:"indexer_budget"`
	CR           int      `json:"indexer_compress_ratio"`
	PLELayers    []int    `json:"ple_layer_ids"`
	NGram        int      `json:"ngram_size"`
	HeadsPer     int      `json:"heads_per_ngram"`
	PLEConvK     int      `json:"ple_conv_kernel_size"`
	Experts      int      `json:"num_experts"`
	TopK         int      `json:"num_experts_per_tok"`
	NormTopK     bool     `json:"norm_topk_prob"`
	MoEInter     int      `json:"moe_intermediate_size"`
	SharedInter  int      `json:"shared_expert_intermediate_size"`
	RopeSettings struct {
		Partial float64 `json:"partial_rotary_factor"`
		Theta   float64 `json:"rope_theta"`
	} `json:"rope_parameters"`
}

// qmodel holds what a run binds: weight and state buffers by name.
type qmodel struct {
	cfg    qcfg
	be     *cpu.Backend
	ck     *weights.Checkpoint
	bufs   map[string]ops.Buffer
	ple    map[int]ops.PLEHashAttrs // by layer
	tables map[int]int              // PLE table shards by layer
	cap    int                      // KV capacity
}

func goldenCheckpoint(t *testing.T, dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg qcfg
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OutGate == "" {
		cfg.OutGate = "silu"
	}
	ck, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var gold struct {
		Cases []struct {
			IDs         []int       `json:"ids"`
			Full        [][]float64 `json:"logits_full"`
			Incremental [][]float64 `json:"logits_incremental"`
		} `json:"cases"`
	}
	raw, err = os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &gold); err != nil {
		t.Fatal(err)
	}
	for ci, gc := range gold.Cases {
		m := &qmodel{cfg: cfg, be: cpu.New(2), ck: ck, bufs: map[string]ops.Buffer{}, ple: map[int]ops.PLEHashAttrs{}, tables: map[int]int{}, cap: 64}
		full := m.run(t, gc.IDs, 0)
		checkLogits(t, fmt.Sprintf("case %d full", ci), full, gc.Full)
		// a fresh state: prefill half, then one token per run
		m = &qmodel{cfg: cfg, be: cpu.New(2), ck: ck, bufs: map[string]ops.Buffer{}, ple: map[int]ops.PLEHashAttrs{}, tables: map[int]int{}, cap: 64}
		half := len(gc.IDs) / 2
		inc := m.run(t, gc.IDs[:half], 0)
		for p := half; p < len(gc.IDs); p++ {
			inc = append(inc, m.run(t, gc.IDs[p:p+1], p)...)
		}
		checkLogits(t, fmt.Sprintf("case %d incremental", ci), inc, gc.Incremental)
	}
}

func checkLogits(t *testing.T, what string, got [][]float32, want [][]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	var num, den, worst float64
	for r := range want {
		for i, w := range want[r] {
			d := float64(got[r][i]) - w
			num += d * d
			den += w * w
			worst = math.Max(worst, math.Abs(d))
		}
	}
	if nmse := num / den; !(nmse < 1e-9) || !(worst < 1e-4) {
		t.Errorf("%s: logits NMSE %.3g, largest difference %.3g", what, nmse, worst)
	} else {
		t.Logf("%s: logits NMSE %.3g, largest difference %.3g", what, nmse, worst)
	}
}

// run builds the graph for len(ids) rows at position pos, binds it and returns the logits.
func (m *qmodel) run(t *testing.T, ids []int, pos int) [][]float32 {
	t.Helper()
	c := m.cfg
	rows := len(ids)
	b := graph.NewBuilder("qwen4")
	call := ops.Call(b)
	idv := b.Input("ids", graph.I32, rows)
	x := ops.HCExpand(b, ops.Embed(b, m.w(t, b, "model.embed_tokens.weight"), idv), c.HC)
	for i, lt := range c.LayerTypes {
		pop := b.Push("layer %d", i)
		pre := fmt.Sprintf("model.layers.%d.", i)
		for j, id := range c.PLELayers {
			if id == i+1 {
				x = m.pleLayer(t, b, pre+"ple.", i, j, x, idv, call)
			}
		}
		u, xn := m.mix(t, b, pre+"attn_hyper_connection.", x)
		var y *graph.Value
		if lt == "linear_attention" {
			y = m.gdn(t, b, pre+"linear_attn.", u, call)
		} else {
			y = m.qsa(t, b, pre+"self_attn.", u, call)
		}
		x = ops.HCInject(b, x, y, ops.MatMul(b, xn, m.w(t, b, pre+"attn_hyper_connection.block_inject_weight.weight")), c.HC)
		u, xn = m.mix(t, b, pre+"mlp_hyper_connection.", x)
		y = m.moe(t, b, pre+"mlp.", u)
		x = ops.HCInject(b, x, y, ops.MatMul(b, xn, m.w(t, b, pre+"mlp_hyper_connection.block_inject_weight.weight")), c.HC)
		pop()
	}
	u, _ := m.mix(t, b, "model.hyper_connection_mixer.", x)
	logits := ops.MatMul(b, u, m.w(t, b, "lm_head.weight"))
	b.Output(logits)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(ops.LookupOp); err != nil {
		t.Fatal(err)
	}
	bound := map[*graph.Value]ops.Buffer{}
	for _, v := range g.Values {
		switch v.Kind {
		case graph.Weight, graph.State:
			bound[v] = m.bufs[v.Name]
		case graph.Input:
			buf, _ := m.be.Alloc(v.DType, v.Shape.Elems())
			data := make([]byte, 4*v.Shape.Elems())
			if v.Name == ops.CallName {
				binary.LittleEndian.PutUint32(data[4*ops.CallPos:], uint32(pos))
			} else {
				for i, id := range ids {
					binary.LittleEndian.PutUint32(data[4*i:], uint32(id))
				}
			}
			if err := m.be.Write(buf, data); err != nil {
				t.Fatal(err)
			}
			bound[v] = buf
		}
	}
	r, err := ops.NewRunner(m.be, g, bound)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Run(); err != nil {
		t.Fatal(err)
	}
	out := cpu.F32(r.Buffer(logits))
	res := make([][]float32, rows)
	for i := range res {
		res[i] = append([]float32(nil), out[i*c.Vocab:(i+1)*c.Vocab]...)
	}
	return res
}

// w declares a checkpoint tensor as an f32 weight, loading it once.
func (m *qmodel) w(t *testing.T, b *graph.Builder, name string) *graph.Value {
	info, err := m.ck.Info(name)
	if err != nil {
		t.Fatal(err)
	}
	return m.weight(t, b, name, info.Shape, func() []float32 {
		v, err := m.ck.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	})
}

// weight declares an f32 weight made by data (called the first time only).
func (m *qmodel) weight(t *testing.T, b *graph.Builder, name string, shape []int, data func() []float32) *graph.Value {
	if _, ok := m.bufs[name]; !ok {
		v := data()
		raw := make([]byte, 4*len(v))
		for i, f := range v {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
		}
		buf, err := m.be.Load(graph.F32, len(v), raw)
		if err != nil {
			t.Fatal(err)
		}
		m.bufs[name] = buf
	}
	return b.Weight(name, graph.F32, shape...)
}

// state declares a zeroed state, allocated the first time (rows: its first extent's bound).
func (m *qmodel) state(t *testing.T, b *graph.Builder, name string, dt graph.DType, rows int, shape ...int) *graph.Value {
	if _, ok := m.bufs[name]; !ok {
		n := rows * graph.Shape(shape[1:]).Elems()
		buf, err := m.be.Alloc(dt, n)
		if err != nil {
			t.Fatal(err)
		}
		m.bufs[name] = buf
	}
	return b.State(name, dt, shape...)
}

// mix is a gated residual: the block input u and the normed hyper-state.
func (m *qmodel) mix(t *testing.T, b *graph.Builder, pre string, x *graph.Value) (u, xn *graph.Value) {
	c := m.cfg
	xn = ops.RMSNorm1p(b, x, m.w(t, b, pre+"hc_norm.weight"), c.Hidden, float32(c.Eps))
	low := ops.SiLU(b, ops.Scale(b, ops.MatMul(b, xn, m.w(t, b, pre+"input_mix_weight_down.weight")), 1/float32(c.HC)))
	return ops.HCMix(b, xn, ops.MatMul(b, low, m.w(t, b, pre+"input_mix_weight_up.weight")), c.HC), xn
}

func (m *qmodel) gdn(t *testing.T, b *graph.Builder, pre string, u, call *graph.Value) *graph.Value {
	c := m.cfg
	cd := 2*c.NK*c.DK + c.NV*c.DV
	ring := m.state(t, b, pre+"ring", graph.F32, c.ConvK-1, c.ConvK-1, cd)
	s := m.state(t, b, pre+"S", graph.F32, c.NV, c.NV, c.DK, c.DV)
	mixed := ops.CausalConv(b, ops.MatMul(b, u, m.w(t, b, pre+"in_proj_qkv.weight")), m.w(t, b, pre+"conv1d.weight"), ring, call,
		ops.ConvAttrs{Dilation: 1, Act: ops.ActSiLU})
	q, k, v := ops.GDNPrep(b, mixed, ops.GDNPrepAttrs{KeyHeads: c.NK, KeyDim: c.DK, ValueHeads: c.NV, ValueDim: c.DV, Eps: 1e-6})
	g, beta := ops.GDNGates(b, ops.MatMul(b, u, m.w(t, b, pre+"in_proj_a.weight")), ops.MatMul(b, u, m.w(t, b, pre+"in_proj_b.weight")),
		m.w(t, b, pre+"A_log"), m.w(t, b, pre+"dt_bias"))
	o := ops.GDNScan(b, q, k, v, g, beta, s, call)
	z := ops.MatMul(b, u, m.w(t, b, pre+"in_proj_z.weight"))
	y := ops.GatedRMSNorm(b, o, z, m.w(t, b, pre+"norm.weight"), ops.GatedRMSNormAttrs{Group: c.DV, Eps: float32(c.Eps), Act: ops.Activation(c.OutGate)})
	return ops.MatMul(b, y, m.w(t, b, pre+"out_proj.weight"))
}

func (m *qmodel) qsa(t *testing.T, b *graph.Builder, pre string, u, call *graph.Value) *graph.Value {
	c := m.cfg
	hd, eps := c.HeadDim, float32(c.Eps)
	rot := int(float64(hd) * c.RopeSettings.Partial)
	rope := ops.RopeAttrs{HeadDim: hd, Rotary: rot, Theta: c.RopeSettings.Theta}
	irope := ops.RopeAttrs{HeadDim: c.IDim, Rotary: rot, Theta: c.RopeSettings.Theta}
	kw := c.KVHeads * hd
	K := m.state(t, b, pre+"K", graph.F32, m.cap, graph.Dyn, kw)
	V := m.state(t, b, pre+"V", graph.F32, m.cap, graph.Dyn, kw)
	kraw := m.state(t, b, pre+"Kraw", graph.F32, c.CR, graph.Dyn, c.IDim)
	keys := m.state(t, b, pre+"B", graph.F32, m.cap/c.CR, graph.Dyn, c.IDim)

	qg := ops.Split(b, ops.MatMul(b, u, m.w(t, b, pre+"q_proj.weight")), c.Heads, hd, hd)
	q := ops.Rope(b, ops.RMSNorm1p(b, qg[0], m.w(t, b, pre+"q_norm.weight"), hd, eps), call, rope)
	k := ops.Rope(b, ops.RMSNorm1p(b, ops.MatMul(b, u, m.w(t, b, pre+"k_proj.weight")), m.w(t, b, pre+"k_norm.weight"), hd, eps), call, rope)
	ops.KVWrite(b, k, K, call, ops.SlotAttrs{})
	ops.KVWrite(b, ops.MatMul(b, u, m.w(t, b, pre+"v_proj.weight")), V, call, ops.SlotAttrs{})
	ik := ops.Split(b, ops.MatMul(b, u, m.w(t, b, pre+"indexer.index_qk_proj.weight")), 1, c.IHeads*c.IDim, c.IDim)
	qi := ops.Rope(b, ops.RMSNorm1p(b, ik[0], m.w(t, b, pre+"indexer.q_layernorm.weight"), c.IDim, eps), call, irope)
	ops.QSABlockKeys(b, ik[1], m.w(t, b, pre+"indexer.k_layernorm.weight"), kraw, keys, call,
		ops.BlockKeyAttrs{Block: c.CR, Rope: irope, Eps: eps, Ring: true})
	sel := ops.QSASelect(b, qi, keys, call, ops.SelectAttrs{Heads: c.IHeads, Block: c.CR, Keep: c.Budget / c.CR})
	y := ops.QSAAttention(b, q, K, V, sel, call, ops.SparseAttentionAttrs{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: hd, Block: c.CR,
		Scale: float32(1 / math.Sqrt(float64(hd)))})
	return ops.MatMul(b, ops.GateMerge(b, y, qg[1]), m.w(t, b, pre+"o_proj.weight"))
}

func (m *qmodel) moe(t *testing.T, b *graph.Builder, pre string, u *graph.Value) *graph.Value {
	c := m.cfg
	h, f, e := c.Hidden, c.MoEInter, c.Experts
	gateUp := m.weight(t, b, pre+"experts.gate_up", []int{e, 2 * f, h}, func() []float32 {
		var out []float32
		for i := 0; i < e; i++ {
			for _, part := range []string{"gate_proj", "up_proj"} {
				v, err := m.ck.Float32(fmt.Sprintf("%sexperts.%d.%s.weight", pre, i, part))
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, v...)
			}
		}
		return out
	})
	down := m.weight(t, b, pre+"experts.down", []int{e, h, f}, func() []float32 {
		var out []float32
		for i := 0; i < e; i++ {
			v, err := m.ck.Float32(fmt.Sprintf("%sexperts.%d.down_proj.weight", pre, i))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v...)
		}
		return out
	})
	ids, w := ops.MoERoute(b, ops.MatMul(b, u, m.w(t, b, pre+"gate.weight")), c.TopK, c.NormTopK)
	y := ops.ExpertMatMul(b, ops.SiLUGLU(b, ops.ExpertMatMul(b, u, gateUp, ids)), down, ids)
	gu := ops.GroupedMatMul(b, u, m.w(t, b, pre+"shared_expert.gate_proj.weight"), m.w(t, b, pre+"shared_expert.up_proj.weight"))
	s := ops.MatMul(b, ops.Mul(b, ops.SiLU(b, gu[0]), gu[1]), m.w(t, b, pre+"shared_expert.down_proj.weight"))
	return ops.MoECombine(b, y, w, s, ops.MatMul(b, u, m.w(t, b, pre+"shared_expert_gate.weight")))
}

func (m *qmodel) i64s(t *testing.T, name string) []int64 {
	raw, err := m.ck.Bytes(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(raw)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return out
}

func (m *qmodel) pleLayer(t *testing.T, b *graph.Builder, pre string, layer, _ int, x, ids, call *graph.Value) *graph.Value {
	c := m.cfg
	h, eps := c.Hidden, float32(c.Eps)
	at := ops.PLEHashAttrs{NGram: c.NGram, HeadsPerNGram: c.HeadsPer, EOS: int32(c.EOS),
		Mult:    m.i64s(t, pre+"ple_embedding.layer_multipliers"),
		Sizes:   m.i64s(t, pre+"ple_embedding.ngram_heads_vocab_sizes"),
		Offsets: m.i64s(t, pre+"ple_embedding.ngram_heads_offsets")}
	hist := m.state(t, b, pre+"hist", graph.I32, c.NGram-1, c.NGram-1)
	dil := c.NGram
	ring := m.state(t, b, pre+"ring", graph.F32, (c.PLEConvK-1)*dil, (c.PLEConvK-1)*dil, c.HC*h)
	var shards []*graph.Value
	for k := 0; ; k++ {
		name := fmt.Sprintf("%sple_embedding.ngram_embedding.shard_%d.weight", pre, k)
		if !m.ck.Has(name) {
			break
		}
		shards = append(shards, m.w(t, b, name))
	}
	rows := ops.PLEHash(b, ids, hist, call, at)
	e := ops.NGramEmbed(b, rows, shards...)
	kn := ops.RMSNorm1p(b, ops.MatMul(b, e, m.w(t, b, pre+"key_proj.weight")), m.w(t, b, pre+"norm_key.weight"), h, eps)
	qn := ops.RMSNorm1p(b, x, m.w(t, b, pre+"norm_query.weight"), h, eps)
	gv := ops.PLEGate(b, kn, qn, ops.MatMul(b, e, m.w(t, b, pre+"value_proj.weight")), c.HC)
	cv := ops.CausalConv(b, ops.RMSNorm1p(b, gv, m.w(t, b, pre+"norm_conv.weight"), h, eps), m.w(t, b, pre+"conv1d.weight"), ring, call,
		ops.ConvAttrs{Dilation: dil, Act: ops.ActSiLU})
	_ = layer
	return ops.Add(b, ops.Add(b, x, gv), cv)
}
