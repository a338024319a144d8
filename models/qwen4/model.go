package qwen4

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// Model is a loaded Qwen4-Exp: its config, every weight its graphs declare
// as stored (the per-expert tensors of a transformers checkpoint stacked
// into the [E, ...] layout of the expert ops), and each PLE layer's hash
// constants and n-gram table shards.
type Model struct {
	Config Config
	lm.Loaded
	ple    map[int]ops.PLEHashAttrs
	shards map[int][]shard
	// HasMTP says the checkpoint carries the MTP draft head (mtp.* tensors).
	HasMTP bool
}

// shard is one part of a PLE layer's n-gram table: its weight and rows.
type shard struct {
	name string
	rows int
}

func newModel(c Config) *Model {
	return &Model{Config: c, Loaded: lm.Loaded{Tensors: lm.Tensors{}}, ple: map[int]ops.PLEHashAttrs{}, shards: map[int][]shard{}}
}

// Load reads a Qwen4-Exp checkpoint folder: config.json and safetensors
// (sharded or not, f32, f16 or bf16), with the tensors under model. (the
// causal LM) or model.language_model. (the multimodal wrapper). The
// checkpoint must hold every weight the model's graphs declare, with its
// shape, and nothing else of the text model; errors name the tensor and
// its layer. A checkpoint stored quantized (its config's
// quantization_config, as lm.Quant describes it) is read as it is.
func Load(dir string) (*Model, error) { return LoadQuantized(dir, "") }

// LoadQuantized is Load, quantizing at load the projections the checkpoint
// stores in a float type in the format of quant ("fp8", "q8", "q4"; "":
// none): see Quantize for which.
func LoadQuantized(dir, quant string) (*Model, error) {
	return lm.Load(dir, "qwen4", quant, func(cfg *weights.Config) (Config, error) {
		if mt, _ := cfg.String("model_type", "qwen4_exp_text"); !strings.HasPrefix(mt, "qwen4_exp") {
			return Config{}, fmt.Errorf("%s: model_type %q is not qwen4_exp", cfg.Path(), mt)
		}
		return ConfigFromJSON(cfg)
	}, fromCheckpoint)
}

// Names of the graph weights that are not checkpoint tensors as such.
const (
	// ExpertsGateUp is a layer's stacked gate and up projections [E, 2F, H]
	// (gate rows first), after the layer's prefix.
	ExpertsGateUp = "mlp.experts.gate_up_proj"
	// ExpertsDown is a layer's stacked down projections [E, H, F].
	ExpertsDown = "mlp.experts.down_proj"
)

// LayerPrefix is the weight name prefix of decoder layer li.
func LayerPrefix(li int) string { return fmt.Sprintf("model.layers.%d.", li) }

// MTPPrefix is the weight name prefix of the MTP head's layer.
const MTPPrefix = "mtp.layers.0."

// fromCheckpoint reads the PLE layers' constants and shards, then the
// weights the graphs declare, stored as st says.
func fromCheckpoint(c Config, st lm.Stored, ck *weights.Checkpoint) (*Model, error) {
	m := newModel(c)
	m.Checkpoint, m.Quant = ck, st.Quant
	r := newResolver(ck)
	m.HasMTP = c.MTPLayers > 0 && r.name("mtp.fc_hidden.weight") != ""
	consts := map[string]bool{} // the PLE constant tensors read
	for li := range c.Layers {
		if c.HasPLE(li) {
			if err := m.readPLE(r, li, consts); err != nil {
				return nil, err
			}
		}
	}
	st.DType = func(n string) graph.DType {
		if isOffsetNorm(n) {
			return graph.F32 // 1 + w, folded at load
		}
		return r.dtype(n)
	}
	decl, err := m.declare(st)
	if err != nil {
		return nil, err
	}
	m.Tensors, err = lm.LoadWeights(ck, decl, lm.LoadOptions{
		Name:   r.name,
		Make:   r.experts().Make,
		Format: st.Quant, // experts stored one by one quantized: their scales are stacked too
		Fold:   onePlus,
		Unused: func(n string) bool { return consts[n] || r.unused(n, m.HasMTP) },
		Quant:  st.OnLoad(),
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// offsetNorms are the endings of the names of the RMS norm weights a
// checkpoint stores as offsets from one (transformers' norm applies 1 + w);
// every other norm weight (the GDN's gated norm) is used as stored.
var offsetNorms = []string{
	".hc_norm.weight", ".q_norm.weight", ".k_norm.weight", ".q_layernorm.weight", ".k_layernorm.weight",
	".norm_key.weight", ".norm_query.weight", ".norm_conv.weight", ".pre_fc_norm_embedding.weight", ".pre_fc_norm_hidden.weight",
}

// isOffsetNorm reports whether weight name is an offset norm's.
func isOffsetNorm(name string) bool {
	for _, s := range offsetNorms {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// onePlus folds an offset norm's weight into 1 + w at load, in f32 as
// transformers computes it, so the graphs apply it with rmsnorm.
func onePlus(name string) func(w []float32) {
	if !isOffsetNorm(name) {
		return nil
	}
	return func(w []float32) {
		for i := range w {
			w[i]++
		}
	}
}

// declare builds the graphs that read every weight of m (a forward, and
// the MTP head's when m has one), the weights stored as st says, and
// lists the weights they declare, each named with its layer ("layer 3",
// "mtp", "head").
func (m *Model) declare(st lm.Stored) ([]lm.Declared, error) {
	keys := []Key{{Stage: Forward, Want: lm.WantLast, Rows: 1}}
	if m.HasMTP {
		keys = append(keys, Key{Stage: Draft, Want: lm.WantLast, Rows: 1})
	}
	var gs []*graph.Graph
	for _, k := range keys {
		g, err := Build(&m.Config, k, declaring{m, st})
		if err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	decl, err := lm.Declarations(gs...)
	if err != nil {
		return nil, err
	}
	for i := range decl {
		decl[i].Scope, _, _ = strings.Cut(decl[i].Scope, " / ")
	}
	return decl, nil
}

// declaring is the Weights of a model whose weights are not made yet: its
// PLE layers, and the weights stored as st says.
type declaring struct {
	*Model
	st lm.Stored
}

func (d declaring) Stored() lm.Stored { return d.st }

// resolver maps graph weight names to the checkpoint's.
type resolver struct {
	ck  *weights.Checkpoint
	pre string // what stands for "model." in the checkpoint
}

func newResolver(ck *weights.Checkpoint) resolver {
	for _, p := range []string{"model.", "model.language_model."} {
		if ck.Has(p + "embed_tokens.weight") {
			return resolver{ck: ck, pre: p}
		}
	}
	return resolver{ck: ck, pre: "model."}
}

// name gives the checkpoint's name of a graph weight ("" if absent).
func (r resolver) name(n string) string {
	var cands []string
	switch {
	case strings.HasPrefix(n, "model."):
		cands = []string{r.pre + strings.TrimPrefix(n, "model.")}
	case strings.HasPrefix(n, "mtp."):
		cands = []string{n, "model." + n, r.pre + n}
	default:
		cands = []string{n}
	}
	for _, x := range cands {
		if r.ck.Has(x) {
			return x
		}
	}
	return ""
}

// dtype is a graph weight's stored dtype, as the graphs that load it
// declare it: a stacked expert weight the checkpoint stores per expert
// takes expert 0's; a weight absent or in no float or quantized dtype is
// f32 (the loader then says what is wrong with it).
func (r resolver) dtype(name string) graph.DType {
	if info, err := r.ck.Info(r.experts().Stored(name)); err == nil && (info.DType.IsFloat() || info.DType.IsQuantized()) {
		return info.DType
	}
	return graph.F32
}

// unused says a checkpoint tensor is none of the text model's: the MTP
// head's in a model without one, or a multimodal wrapper's other parts.
func (r resolver) unused(n string, mtp bool) bool {
	for _, p := range []string{"mtp.", "model.mtp.", r.pre + "mtp."} {
		if strings.HasPrefix(n, p) {
			return !mtp
		}
	}
	return r.pre != "model." && !strings.HasPrefix(n, r.pre) && n != "lm_head.weight"
}

// experts are the stacked expert weights (ExpertsGateUp, ExpertsDown) as
// a checkpoint may store them: mlp.experts.{e}.{gate,up,down}_proj.weight.
func (r resolver) experts() lm.ExpertStacks {
	return lm.ExpertStacks{Checkpoint: r.ck, Dir: "mlp.experts.", Name: r.name, Parts: map[string][]string{
		ExpertsGateUp: {"gate_proj.weight", "up_proj.weight"}, ExpertsDown: {"down_proj.weight"}}}
}

// PLE constant buffers, after a PLE layer's prefix.
const (
	pleMult    = "ple.ple_embedding.layer_multipliers"
	pleSizes   = "ple.ple_embedding.ngram_heads_vocab_sizes"
	pleOffsets = "ple.ple_embedding.ngram_heads_offsets"
)

// ShardName is the weight name of shard k of layer li's n-gram table.
func ShardName(li, k int) string {
	return fmt.Sprintf("%sple.ple_embedding.ngram_embedding.shard_%d.weight", LayerPrefix(li), k)
}

// readPLE reads PLE layer li's hash constants (computed from the config
// where the checkpoint does not store them; consts gets the names of those
// it read) and finds its table's shards, their names and rows.
func (m *Model) readPLE(r resolver, li int, consts map[string]bool) error {
	c := &m.Config
	nh := c.PLEHeads()
	width := c.PLEDim / nh
	where := fmt.Sprintf("layer %d", li)
	hash := pleHash(c, li)
	pre := LayerPrefix(li)
	for _, b := range []struct {
		name string
		dst  []int64
	}{{pleMult, hash.Mult}, {pleSizes, hash.Sizes}, {pleOffsets, hash.Offsets}} {
		n := r.name(pre + b.name)
		if n == "" {
			continue
		}
		info, err := r.ck.Info(n)
		if err != nil {
			return fmt.Errorf("%s: tensor %s: %w", where, pre+b.name, err)
		}
		if info.DType != graph.I64 || len(info.Shape) != 1 || info.Shape[0] != len(b.dst) {
			return fmt.Errorf("%s: tensor %s: %s %v, want i64 [%d]", where, pre+b.name, info.DType, info.Shape, len(b.dst))
		}
		raw, err := r.ck.Bytes(n)
		if err != nil {
			return fmt.Errorf("%s: tensor %s: %w", where, pre+b.name, err)
		}
		for i := range b.dst {
			b.dst[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
		}
		consts[n] = true
	}
	need := int64(0)
	for h := range hash.Sizes {
		if hash.Sizes[h] <= 0 || hash.Offsets[h] < 0 {
			return fmt.Errorf("%s: PLE head %d has table size %d at offset %d", where, h, hash.Sizes[h], hash.Offsets[h])
		}
		end := hash.Offsets[h] + hash.Sizes[h]
		if end < hash.Offsets[h] {
			return fmt.Errorf("%s: PLE head %d: offset %d + table size %d overflows (tensors %s, %s)", where, h, hash.Offsets[h], hash.Sizes[h], pleOffsets, pleSizes)
		}
		need = max(need, end)
	}
	rows := 0
	for k := 0; c.PLEShards == 0 || k < c.PLEShards; k++ {
		name := ShardName(li, k)
		n := r.name(name)
		if n == "" {
			if c.PLEShards == 0 && k > 0 {
				break
			}
			return fmt.Errorf("%s: tensor %s: missing from the checkpoint", where, name)
		}
		info, err := r.ck.Info(n)
		if err != nil {
			return fmt.Errorf("%s: tensor %s: %w", where, name, err)
		}
		if len(info.Shape) != 2 || info.Shape[1] != width || info.Shape[0] <= 0 {
			return fmt.Errorf("%s: tensor %s: shape %v, want [rows, %d] (ple_embed_dim %d over %d heads)", where, name, info.Shape, width, c.PLEDim, nh)
		}
		m.shards[li] = append(m.shards[li], shard{name, info.Shape[0]})
		rows += info.Shape[0]
	}
	if int64(rows) < need {
		return fmt.Errorf("%s: the n-gram table's %d rows do not hold the %d its heads index", where, rows, need)
	}
	m.ple[li] = hash
	return nil
}

// pleHash is PLE layer li's hash attributes computed from the config.
func pleHash(c *Config, li int) ops.PLEHashAttrs {
	mult, sizes, offs := PLEConstants(c, c.PLEIndex(li))
	return ops.PLEHashAttrs{NGram: c.NGram, HeadsPerNGram: c.HeadsPerNGram, EOS: int32(c.EOS), Mult: mult, Sizes: sizes, Offsets: offs}
}

// PLEConstants computes the hash constants of the PLE layer with index idx
// among the PLE layers (as transformers' modeling_qwen4_exp.py makes them): the n multipliers, and each
// table head's size (the next primes from ngram_vocab_size_base, counted
// over every head of the earlier PLE layers) and first row.
func PLEConstants(c *Config, idx int) (mult, sizes, offsets []int64) {
	n, nh := c.NGram, c.PLEHeads()
	half := uint64((1<<63-1)/uint64(max(c.Vocab, 1))) / 2
	mult = make([]int64, n)
	for j := range mult {
		v := splitmix64(uint64(c.Seed) + 10007*uint64(idx) + 0x9E3779B97F4A7C15*uint64(j+1))
		if half > 0 {
			v %= half
		}
		mult[j] = int64(2*v + 1)
	}
	sizes, offsets = make([]int64, nh), make([]int64, nh)
	p, skip := int64(c.NGramBase), idx*nh
	off := int64(0)
	for h := -skip; h < nh; h++ {
		for !isPrime(p) {
			p++
		}
		if h >= 0 {
			sizes[h], offsets[h] = p, off
			off += p
		}
		p++
	}
	return mult, sizes, offsets
}

// PLETableRows is the rows of a PLE layer's table: its heads' sizes summed
// and padded to make_ngram_vocab_size_divisible_by.
func PLETableRows(c *Config, idx int) int {
	_, sizes, _ := PLEConstants(c, idx)
	n := int64(0)
	for _, s := range sizes {
		n += s
	}
	d := int64(max(c.NGramDivisible, 1))
	return int((n + d - 1) / d * d)
}

func splitmix64(v uint64) uint64 {
	v += 0x9E3779B97F4A7C15
	v = (v ^ v>>30) * 0xBF58476D1CE4E5B9
	v = (v ^ v>>27) * 0x94D049BB133111EB
	return v ^ v>>31
}

// isPrime tests n exactly (ProbablyPrime(0) is Baillie-PSW, exact below
// 2^64), in microseconds where trial division took seconds near 2^36.
func isPrime(n int64) bool { return n >= 2 && big.NewInt(n).ProbablyPrime(0) }

// PLEHash gives the hash attributes of PLE layer li (false: not a PLE
// layer).
func (m *Model) PLEHash(li int) (ops.PLEHashAttrs, bool) {
	a, ok := m.ple[li]
	return a, ok
}

// PLEShards gives PLE layer li's table shards: names and rows.
func (m *Model) PLEShards(li int) (names []string, rows []int) {
	for _, s := range m.shards[li] {
		names, rows = append(names, s.name), append(rows, s.rows)
	}
	return names, rows
}
