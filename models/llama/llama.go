// Package llama is the dense decoder of Llama (LlamaForCausalLM) and Qwen3
// (Qwen3ForCausalLM, Llama with an RMSNorm on each query and key head) as
// graphs: for every layer,
//
//	h = x + o(attention(rope(norm_q(q(n₁(x)))), rope(norm_k(k(n₁(x)))), v(n₁(x))))
//	x' = h + down(silu(gate(n₂(h))) ⊙ up(n₂(h)))
//
// with n₁, n₂ RMSNorms, then logits = head(norm(x)). Everything else (the
// session, its KV slots, loading, the registry) is the lm and models
// packages'.
package llama

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

func init() {
	models.Register(models.Arch{
		Name:          "llama",
		ModelTypes:    []string{"llama", "qwen3"},
		Architectures: []string{"LlamaForCausalLM", "Qwen3ForCausalLM"},
		Load:          func(dir string) (models.Model, error) { return Load(dir) },
	})
}

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
	dt   func(name string) graph.DType // a matrix's stored dtype
	call *graph.Value
}

// matrix declares a weight [out, in] as the checkpoint stores it.
func (g *builder) matrix(name string, out, in int) *graph.Value {
	return g.b.Weight(name, g.dt(name), out, in)
}

// vector declares a weight [n] read in f32 (a norm's scale, a bias).
func (g *builder) vector(name string, n int) *graph.Value { return g.b.Weight(name, graph.F32, n) }

// linear is x·Wᵀ (+ bias).
func (g *builder) linear(x *graph.Value, name string, out, in int, bias bool) *graph.Value {
	y := ops.MatMul(g.b, x, g.matrix(name+".weight", out, in))
	if bias {
		y = ops.Add(g.b, y, g.vector(name+".bias", out))
	}
	return y
}

// attention is layer li's self-attention on the normed rows x.
func (g *builder) attention(li int, x *graph.Value) *graph.Value {
	c, b := g.c, g.b
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
	ops.KVWrite(b, k, sk, g.call, ops.SlotAttrs{})
	ops.KVWrite(b, v, sv, g.call, ops.SlotAttrs{})
	y := ops.Attention(b, q, sk, sv, g.call, ops.AttentionAttrs{
		Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Scale: float32(1 / math.Sqrt(float64(c.HeadDim))),
	})
	return b.Label(g.linear(y, p+"o_proj", c.Hidden, qs, c.OBias), "attn_out")
}

// mlp is layer li's SwiGLU MLP on the normed rows x.
func (g *builder) mlp(li int, x *graph.Value) *graph.Value {
	c, b := g.c, g.b
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

// Build builds the graph of a forward chunk. dt gives each matrix's stored
// dtype (nil: bf16).
func Build(c *Config, k Key, dt func(name string) graph.DType) (*graph.Graph, error) {
	if k.Rows < 1 {
		return nil, fmt.Errorf("llama: %d rows: want at least 1", k.Rows)
	}
	if err := k.Want.Check(); err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	if dt == nil {
		dt = func(string) graph.DType { return graph.BF16 }
	}
	b := graph.NewBuilder("llama/" + k.String())
	g := &builder{c: c, b: b, dt: dt, call: ops.Call(b)}
	embed := g.matrix("model.embed_tokens.weight", c.Vocab, c.Hidden)
	x := ops.Embed(b, embed, b.Input(lm.InputIDs, graph.I32, k.Rows))
	for li := range c.Layers {
		func() {
			defer b.Push("layer %d", li)()
			p := fmt.Sprintf("model.layers.%d.", li)
			func() {
				defer b.Push("attn")()
				x = ops.Add(b, x, g.attention(li, g.norm(x, p+"input_layernorm.weight")))
			}()
			defer b.Push("mlp")()
			x = ops.Add(b, x, g.mlp(li, g.norm(x, p+"post_attention_layernorm.weight")))
		}()
	}
	if k.Want == lm.WantNone {
		return b.Graph()
	}
	defer b.Push("head")()
	if k.Want == lm.WantLast && k.Rows > 1 {
		x = ops.SliceRows(b, x, k.Rows-1, k.Rows)
	}
	head := embed
	if !c.Tied {
		head = g.matrix("lm_head.weight", c.Vocab, c.Hidden)
	}
	b.Output(b.Label(ops.MatMul(b, g.norm(x, "model.norm.weight"), head), "logits"))
	return b.Graph()
}

func slotName(li int, kv string) string { return fmt.Sprintf("kv.%d.%s", li, kv) }

// Model is a loaded Llama or Qwen3: its config and its weights.
type Model struct {
	Config  Config
	ckpt    *weights.Checkpoint
	tensors lm.Tensors
}

// declarations are the weights of a model of c whose matrices are stored
// as dt says: those its graphs read (the all-rows graph reads every one).
func declarations(c *Config, dt func(string) graph.DType) ([]lm.Declared, error) {
	g, err := Build(c, Key{Rows: 1, Want: lm.WantAll}, dt)
	if err != nil {
		return nil, err
	}
	return lm.Declarations(g)
}

// Load reads a Llama or Qwen3 checkpoint folder: config.json and
// safetensors (f32, f16 or bf16, sharded or not). The checkpoint must hold
// exactly the weights the graphs declare, with their shapes.
func Load(dir string) (*Model, error) {
	cfg, err := weights.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	c, err := ReadConfig(cfg)
	if err != nil {
		return nil, err
	}
	ck, err := weights.Open(dir)
	if err != nil {
		return nil, err
	}
	decl, err := declarations(&c, lm.StoredDType(ck))
	if err == nil {
		var ts lm.Tensors
		if ts, err = lm.LoadWeights(ck, decl, lm.LoadOptions{Unused: unused}); err == nil {
			return &Model{Config: c, ckpt: ck, tensors: ts}, nil
		}
	}
	ck.Close()
	return nil, fmt.Errorf("llama %s: %w", dir, err)
}

// unused are tensors older checkpoints carry that the graphs compute.
func unused(name string) bool { return strings.HasSuffix(name, ".rotary_emb.inv_freq") }

// Synthetic makes a model of config c with random weights, matrices in dt
// (f32 or bf16) and norm scales near 1.
func Synthetic(c Config, dt graph.DType, seed uint64) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	decl, err := declarations(&c, func(string) graph.DType { return dt })
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
	return &Model{Config: c, tensors: ts}, nil
}

// Arch names the architecture.
func (m *Model) Arch() string { return "llama" }

// Vocab is the length of a row of logits.
func (m *Model) Vocab() int { return m.Config.Vocab }

// Parameters counts the weights' elements.
func (m *Model) Parameters() int { return m.tensors.Parameters() }

// Upload puts every weight on a backend.
func (m *Model) Upload(be ops.Backend, progress lm.Progress) (map[string]ops.Buffer, error) {
	return m.tensors.Upload(be, progress)
}

// Stages names the graphs a dump shows: the forward.
func (m *Model) Stages() []string { return []string{"forward"} }

// Graph builds the forward graph of rows rows.
func (m *Model) Graph(stage string, rows int, want lm.Want, _ models.Options) (*graph.Graph, error) {
	if stage != "forward" {
		return nil, fmt.Errorf("llama: unknown stage %q: want forward", stage)
	}
	return Build(&m.Config, Key{Rows: rows, Want: want}, m.tensors.DType)
}

// Close releases the checkpoint's file mappings.
func (m *Model) Close() error {
	if m.ckpt == nil {
		return nil
	}
	err := m.ckpt.Close()
	m.ckpt = nil
	return err
}

// graphs are a model's graphs as a session runs them.
type graphs struct{ m *Model }

func (g graphs) Vocab() int                             { return g.m.Config.Vocab }
func (g graphs) Key(rows int, want lm.Want) capture.Key { return Key{Rows: rows, Want: want} }
func (g graphs) State(string) (lm.StateSpec, error)     { return lm.StateSpec{Kind: lm.Slot}, nil }
func (g graphs) Build(k capture.Key) (*graph.Graph, error) {
	return Build(&g.m.Config, k.(Key), g.m.tensors.DType)
}

// NewSession starts a session on the model's weights.
func (m *Model) NewSession(o models.Options) (models.Session, error) {
	if err := o.CheckParams("llama"); err != nil {
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
	return lm.NewSession(m, graphs{m}, o)
}
