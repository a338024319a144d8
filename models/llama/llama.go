// Package llama is the dense decoder of Llama (LlamaForCausalLM) and Qwen3
// (Qwen3ForCausalLM, Llama with an RMSNorm on each query and key head) as
// graphs: for every layer,
//
//	h = x + o(attention(rope(norm_q(q(n₁(x)))), rope(norm_k(k(n₁(x)))), v(n₁(x))))
//	x' = h + down(silu(gate(n₂(h))) ⊙ up(n₂(h)))
//
// with n₁, n₂ RMSNorms, then logits = head(norm(x)). Everything else (the
// session, its KV slots, loading, the registry) is the lm and models
// packages'. An architecture derived from Llama (a sliding window, other
// biases) is a package that reads its config into a Config and calls
// Register: models/mistral and models/qwen2 are.
package llama

import (
	"fmt"
	"math"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

func init() {
	Register(models.Arch{Name: "llama", ModelTypes: []string{"llama", "qwen3"},
		Architectures: []string{"LlamaForCausalLM", "Qwen3ForCausalLM"}}, ReadConfig)
}

// Register registers a (its name, model types, architectures) as this
// package's decoder over the Config read reads from a config.json
// (ReadConfig's, changed where a differs), setting a's Load functions.
func Register(a models.Arch, read func(*weights.Config) (Config, error)) {
	a.Load = func(dir string) (models.Model, error) { return load(a.Name, dir, "", read) }
	a.LoadQuantized = func(dir, quant string) (models.Model, error) { return load(a.Name, dir, quant, read) }
	models.Register(a)
}

// Rewind is how many positions a session of a model with sliding windows
// can roll back: the rows its rings keep past a window and a chunk.
const Rewind = 256

// Key names a graph: a forward chunk of Rows rows whose logits are Want.
type Key struct {
	Rows int
	Want lm.Want
}

// String writes the key as dumps and logs show it.
func (k Key) String() string { return fmt.Sprintf("forward/want=%s/rows=%d", k.Want, k.Rows) }

// builder holds what building one graph needs.
type builder struct {
	c    *Config
	b    *graph.Builder
	st   lm.Stored // how the weights are stored
	call *graph.Value
}

// vector declares a weight [n] read in f32 (a norm's scale, a bias).
func (g *builder) vector(name string, n int) *graph.Value { return g.b.Weight(name, graph.F32, n) }

// linear is x·Wᵀ (+ bias), W as stored (quantized or not).
func (g *builder) linear(x *graph.Value, name string, out, in int, bias bool) *graph.Value {
	y := g.st.Linear(g.b, x, name+".weight", out, in)
	if bias {
		y = ops.Add(g.b, y, g.vector(name+".bias", out))
	}
	return y
}

// attention is layer li's attention sub-layer: x plus the self-attention
// of the normed rows.
func (g *builder) attention(li int, x0 *graph.Value) *graph.Value {
	c, b := g.c, g.b
	defer b.Push("attn")()
	x := g.norm(x0, fmt.Sprintf("model.layers.%d.input_layernorm.weight", li))
	p := fmt.Sprintf("model.layers.%d.self_attn.", li)
	qs, kvs := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	q := b.Label(g.linear(x, p+"q_proj", qs, c.Hidden, c.AttnBias), "q")
	k := b.Label(g.linear(x, p+"k_proj", kvs, c.Hidden, c.AttnBias), "k")
	v := b.Label(g.linear(x, p+"v_proj", kvs, c.Hidden, c.AttnBias), "v")
	if c.QKNorm {
		q = ops.RMSNorm(b, q, g.vector(p+"q_norm.weight", c.HeadDim), c.HeadDim, c.Eps)
		k = ops.RMSNorm(b, k, g.vector(p+"k_norm.weight", c.HeadDim), c.HeadDim, c.Eps)
	}
	q, k = ops.Rope(b, q, g.call, c.Rope), ops.Rope(b, k, g.call, c.Rope)
	sk := b.State(slotName(li, "k"), graph.F32, graph.Dyn, kvs)
	sv := b.State(slotName(li, "v"), graph.F32, graph.Dyn, kvs)
	w := c.Window // a sliding window's slots are rings
	ops.KVWrite(b, k, sk, g.call, ops.SlotAttrs{Ring: w > 0})
	ops.KVWrite(b, v, sv, g.call, ops.SlotAttrs{Ring: w > 0})
	y := ops.Attention(b, q, sk, sv, g.call, ops.AttentionAttrs{Heads: c.Heads, KVHeads: c.KVHeads,
		HeadDim: c.HeadDim, Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), Window: w, Ring: w > 0})
	return ops.Add(b, x0, b.Label(g.linear(y, p+"o_proj", c.Hidden, qs, c.OBias), "attn_out"))
}

// mlp is layer li's SwiGLU MLP on the normed rows of x.
func (g *builder) mlp(li int, x *graph.Value) *graph.Value {
	c, b := g.c, g.b
	defer b.Push("mlp")()
	x = g.norm(x, fmt.Sprintf("model.layers.%d.post_attention_layernorm.weight", li))
	p := fmt.Sprintf("model.layers.%d.mlp.", li)
	gate := g.linear(x, p+"gate_proj", c.FFN, c.Hidden, c.MLPBias)
	up := g.linear(x, p+"up_proj", c.FFN, c.Hidden, c.MLPBias)
	y := ops.Mul(b, ops.SiLU(b, gate), up)
	return b.Label(g.linear(y, p+"down_proj", c.Hidden, c.FFN, c.MLPBias), "mlp_out")
}

// norm is an RMSNorm over the hidden size with the weight of name.
func (g *builder) norm(x *graph.Value, name string) *graph.Value {
	return ops.RMSNorm(g.b, x, g.vector(name, g.c.Hidden), 0, g.c.Eps)
}

// Build builds the graph of a forward chunk over weights stored as st says
// (the zero Stored: matrices in bf16).
func Build(c *Config, k Key, st lm.Stored) (*graph.Graph, error) {
	if k.Rows < 1 {
		return nil, fmt.Errorf("llama: %d rows: want at least 1", k.Rows)
	}
	if err := k.Want.Check(); err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	b := graph.NewBuilder("llama/" + k.String())
	g := &builder{c: c, b: b, st: st, call: ops.Call(b)}
	embed := st.Matrix(b, "model.embed_tokens.weight", c.Vocab, c.Hidden) // as stored, read whole
	x := b.Label(ops.Embed(b, embed, b.Input(lm.InputIDs, graph.I32, k.Rows)), "embed")
	for li := range c.Layers {
		pop := b.Push("layer %d", li)
		x = g.attention(li, x)
		x = b.Label(ops.Add(b, x, g.mlp(li, x)), "out") // the layer's output: "layer N / out"
		pop()
	}
	if k.Want == lm.WantNone {
		return b.Graph()
	}
	defer b.Push("head")()
	if k.Want == lm.WantLast && k.Rows > 1 {
		x = ops.LastRow(b, x, g.call) // the last row in use: a chunk may run on a bucket's plan
	}
	head := embed
	if !c.Tied {
		head = st.Matrix(b, "lm_head.weight", c.Vocab, c.Hidden)
	}
	b.Output(b.Label(ops.MatMul(b, b.Label(g.norm(x, "model.norm.weight"), "norm"), head), "logits"))
	return b.Graph()
}

func slotName(li int, kv string) string { return fmt.Sprintf("kv.%d.%s", li, kv) }

// Model is a loaded model of this decoder: its config and its weights.
type Model struct {
	Config Config
	lm.Loaded
	arch string // the registered architecture's name
}

// declarations are the weights of a model of c whose weights are stored
// as st says: those its graphs read (the all-rows graph reads every one).
func declarations(c *Config, st lm.Stored) ([]lm.Declared, error) {
	g, err := Build(c, Key{Rows: 1, Want: lm.WantAll}, st)
	if err != nil {
		return nil, err
	}
	return lm.Declarations(g)
}

// Load reads a Llama or Qwen3 checkpoint folder: config.json and
// safetensors (f32, f16 or bf16, sharded or not; the projections may be
// stored quantized as lm.Quant describes: FP8 as published, q8, q4). The
// checkpoint must hold exactly the weights the graphs declare, with their
// shapes.
func Load(dir string) (*Model, error) { return LoadQuantized(dir, "") }

// LoadQuantized is Load, quantizing at load the projections the checkpoint
// stores in a float type in the format of quant ("fp8", "q8", "q4"; "":
// none). The embedding, the norms and the output head stay as stored.
func LoadQuantized(dir, quant string) (*Model, error) { return load("llama", dir, quant, ReadConfig) }

// load is LoadQuantized of the architecture arch, whose config.json read reads.
func load(arch, dir, quant string, read func(*weights.Config) (Config, error)) (*Model, error) {
	return lm.Load(dir, arch, quant, read, func(c Config, st lm.Stored, ck *weights.Checkpoint) (*Model, error) {
		st.DType = lm.StoredDType(ck)
		decl, err := declarations(&c, st)
		if err != nil {
			return nil, err
		}
		ts, err := lm.LoadWeights(ck, decl, lm.LoadOptions{Unused: c.unused, Quant: st.OnLoad()})
		if err != nil {
			return nil, err
		}
		return &Model{Config: c, Loaded: lm.Loaded{Tensors: ts, Checkpoint: ck, Quant: st.Quant}, arch: arch}, nil
	})
}

// unused are tensors a checkpoint may carry that the graphs do not read:
// the rotary frequencies older checkpoints stored, and with tied
// embeddings an lm_head.weight, which transformers ties to the embedding
// table (the table is the head then, whatever the file holds).
func (c *Config) unused(name string) bool {
	return strings.HasSuffix(name, ".rotary_emb.inv_freq") || (c.Tied && name == "lm_head.weight")
}

// Synthetic makes a model of config c with random weights, matrices in dt
// (f32 or bf16) and norm scales near 1.
func Synthetic(c Config, dt graph.DType, seed uint64) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	decl, err := declarations(&c, lm.Stored{DType: func(string) graph.DType { return dt }})
	if err != nil {
		return nil, err
	}
	ts, err := lm.Synthesize(decl, seed, func(d lm.Declared, _ int, u float64) float32 {
		if strings.HasSuffix(d.Name, ".bias") {
			return float32(u - 0.5)
		}
		return float32(0.5 + u)
	}, nil)
	if err != nil {
		return nil, err
	}
	return &Model{Config: c, Loaded: lm.Loaded{Tensors: ts}, arch: "llama"}, nil
}

// Arch names the architecture.
func (m *Model) Arch() string { return m.arch }

// Vocab is the length of a row of logits.
func (m *Model) Vocab() int { return m.Config.Vocab }

// Parameters counts the weights' elements (a quantized matrix's, not its
// codes' and scales').
func (m *Model) Parameters() int {
	return m.Loaded.Parameters(func(st lm.Stored) ([]lm.Declared, error) { return declarations(&m.Config, st) })
}

// Stages names the graphs a dump shows: the forward.
func (m *Model) Stages() []string { return []string{"forward"} }

// Graph builds the forward graph of rows rows.
func (m *Model) Graph(stage string, rows int, want lm.Want, _ models.Options) (*graph.Graph, error) {
	if stage != "forward" {
		return nil, fmt.Errorf("llama: unknown stage %q: want forward", stage)
	}
	return Build(&m.Config, Key{Rows: rows, Want: want}, m.Stored())
}

// NewSession starts a session on the model's weights.
func (m *Model) NewSession(o models.Options) (models.Session, error) {
	if err := o.CheckParams(m.arch); err != nil {
		return nil, err
	}
	return m.Session(o.SessionOptions)
}

// Session starts a session on the model's weights (NewSession's concrete
// result).
func (m *Model) Session(o lm.SessionOptions) (*lm.Session, error) {
	if o.MaxPositions == 0 {
		o.MaxPositions = m.Config.MaxPositions
	}
	chunk, err := lm.ChunkRows(o.Chunk)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.arch, err)
	}
	return lm.NewSession(m, lm.GraphFuncs[Key]{
		VocabSize: m.Config.Vocab,
		KeyOf:     func(rows int, want lm.Want) Key { return Key{Rows: rows, Want: want} },
		BuildOf:   func(k Key) (*graph.Graph, error) { return Build(&m.Config, k, m.Stored()) },
		// the KV slots' capacity doubles; with a sliding window they are
		// rings of the window, a chunk and Rewind rows
		StateOf: func(string) (lm.StateSpec, error) {
			if w := m.Config.Window; w > 0 {
				return lm.StateSpec{Kind: lm.Ring, Rows: w + chunk - 1 + Rewind, Rewind: Rewind}, nil
			}
			return lm.StateSpec{Kind: lm.Slot}, nil
		},
	}, o)
}

// Quantize quantizes the projections the model holds in a float type in
// the format of quant ("fp8", "q8", "q4"), as LoadQuantized does at load:
// for a synthetic model. m is spent: the model returned holds its
// checkpoint's mappings.
func (m *Model) Quantize(quant string, progress lm.Progress) (models.Model, error) {
	l, ok, err := m.Loaded.Quantize(quant, func(st lm.Stored) ([]lm.Declared, error) { return declarations(&m.Config, st) }, progress)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.arch, err)
	}
	if !ok {
		return m, nil
	}
	return &Model{Config: m.Config, Loaded: l, arch: m.arch}, nil
}
