package qwen4

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// Model is a loaded Qwen4-Exp: its config, every weight as stored (the
// per-expert tensors of a transformers checkpoint stacked into the [E, ...]
// layout of the expert ops), and each PLE layer's hash constants.
type Model struct {
	Config  Config
	ckpt    *weights.Checkpoint
	tensors lm.Tensors
	ple     map[int]ops.PLEHashAttrs
	shards  map[int][]string
	// HasMTP says the checkpoint carries the MTP draft head (mtp.* tensors).
	HasMTP bool
}

// Load reads a Qwen4-Exp checkpoint folder: config.json and safetensors
// (sharded or not, f32, f16 or bf16), with the tensors under model. (the
// causal LM) or model.language_model. (the multimodal wrapper). Every tensor
// the config implies must be there with its shape; errors name the tensor
// and its layer.
func Load(dir string) (*Model, error) {
	cfg, err := weights.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	if mt, _ := cfg.String("model_type", "qwen4_exp_text"); !strings.HasPrefix(mt, "qwen4_exp") {
		return nil, fmt.Errorf("%s: model_type %q is not qwen4_exp", cfg.Path(), mt)
	}
	c, err := ConfigFromJSON(cfg)
	if err != nil {
		return nil, err
	}
	ck, err := weights.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := fromCheckpoint(c, ck)
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("qwen4 %s: %w", dir, err)
	}
	return m, nil
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

// spec is one tensor the config implies.
type spec struct {
	name  string
	shape []int
	where string // "layer 3", "mtp", "" for the top level
}

// residualSpecs are a gated residual's tensors (inject: with its block inject weight).
func (c *Config) residualSpecs(pre, where string, inject bool) []spec {
	ch := c.Streams * c.Hidden
	out := []spec{
		{pre + "hc_norm.weight", []int{ch}, where},
		{pre + "input_mix_weight_down.weight", []int{c.Rank, ch}, where},
		{pre + "input_mix_weight_up.weight", []int{ch, c.Rank}, where},
	}
	if inject {
		out = append(out, spec{pre + "block_inject_weight.weight", []int{c.Streams, ch}, where})
	}
	return out
}

func (c *Config) qsaSpecs(pre, where string) []spec {
	h := c.Hidden
	kv := c.KVHeads * c.HeadDim
	return []spec{
		{pre + "q_proj.weight", []int{2 * c.Heads * c.HeadDim, h}, where},
		{pre + "k_proj.weight", []int{kv, h}, where},
		{pre + "v_proj.weight", []int{kv, h}, where},
		{pre + "o_proj.weight", []int{h, c.Heads * c.HeadDim}, where},
		{pre + "q_norm.weight", []int{c.HeadDim}, where},
		{pre + "k_norm.weight", []int{c.HeadDim}, where},
		{pre + "indexer.index_qk_proj.weight", []int{(c.IndexHeads + 1) * c.IndexDim, h}, where},
		{pre + "indexer.q_layernorm.weight", []int{c.IndexDim}, where},
		{pre + "indexer.k_layernorm.weight", []int{c.IndexDim}, where},
	}
}

func (c *Config) gdnSpecs(pre, where string) []spec {
	h := c.Hidden
	vd := c.ValueHeads * c.ValueDim
	return []spec{
		{pre + "in_proj_qkv.weight", []int{c.ConvDim(), h}, where},
		{pre + "in_proj_z.weight", []int{vd, h}, where},
		{pre + "in_proj_b.weight", []int{c.ValueHeads, h}, where},
		{pre + "in_proj_a.weight", []int{c.ValueHeads, h}, where},
		{pre + "conv1d.weight", []int{c.ConvDim(), 1, c.ConvKernel}, where},
		{pre + "dt_bias", []int{c.ValueHeads}, where},
		{pre + "A_log", []int{c.ValueHeads}, where},
		{pre + "norm.weight", []int{c.ValueDim}, where},
		{pre + "out_proj.weight", []int{h, vd}, where},
	}
}

// moeSpecs are the MoE's tensors but the experts (stacked separately).
func (c *Config) moeSpecs(pre, where string) []spec {
	h := c.Hidden
	return []spec{
		{pre + "gate.weight", []int{c.Experts, h}, where},
		{pre + "shared_expert.gate_proj.weight", []int{c.SharedFFN, h}, where},
		{pre + "shared_expert.up_proj.weight", []int{c.SharedFFN, h}, where},
		{pre + "shared_expert.down_proj.weight", []int{h, c.SharedFFN}, where},
		{pre + "shared_expert_gate.weight", []int{1, h}, where},
	}
}

func (c *Config) pleSpecs(pre, where string) []spec {
	ch := c.Streams * c.Hidden
	return []spec{
		{pre + "key_proj.weight", []int{ch, c.PLEDim}, where},
		{pre + "value_proj.weight", []int{c.Hidden, c.PLEDim}, where},
		{pre + "norm_key.weight", []int{ch}, where},
		{pre + "norm_query.weight", []int{ch}, where},
		{pre + "norm_conv.weight", []int{ch}, where},
		{pre + "conv1d.weight", []int{ch, 1, c.PLEConvKernel}, where},
	}
}

// specs lists the plain tensors of the backbone (experts, PLE tables and
// constants are read apart).
func (c *Config) specs() []spec {
	out := []spec{
		{"model.embed_tokens.weight", []int{c.Vocab, c.Hidden}, ""},
		{"lm_head.weight", []int{c.Vocab, c.Hidden}, ""},
	}
	out = append(out, c.residualSpecs("model.hyper_connection_mixer.", "", false)...)
	for li, kind := range c.Layers {
		p, where := LayerPrefix(li), fmt.Sprintf("layer %d", li)
		if c.HasPLE(li) {
			out = append(out, c.pleSpecs(p+"ple.", where)...)
		}
		out = append(out, c.residualSpecs(p+"attn_hyper_connection.", where, true)...)
		if kind == GDN {
			out = append(out, c.gdnSpecs(p+"linear_attn.", where)...)
		} else {
			out = append(out, c.qsaSpecs(p+"self_attn.", where)...)
		}
		out = append(out, c.residualSpecs(p+"mlp_hyper_connection.", where, true)...)
		out = append(out, c.moeSpecs(p+"mlp.", where)...)
	}
	return out
}

// mtpSpecs lists the MTP head's plain tensors.
func (c *Config) mtpSpecs() []spec {
	h, ch := c.Hidden, c.Streams*c.Hidden
	out := []spec{
		{"mtp.pre_fc_norm_embedding.weight", []int{h}, "mtp"},
		{"mtp.pre_fc_norm_hidden.weight", []int{ch}, "mtp"},
		{"mtp.fc_embedding.weight", []int{h, h}, "mtp"},
		{"mtp.fc_hidden.weight", []int{h, h}, "mtp"},
	}
	out = append(out, c.residualSpecs("mtp.hyper_connection_mixer.", "mtp", false)...)
	out = append(out, c.residualSpecs(MTPPrefix+"attn_hyper_connection.", "mtp", true)...)
	out = append(out, c.qsaSpecs(MTPPrefix+"self_attn.", "mtp")...)
	out = append(out, c.residualSpecs(MTPPrefix+"mlp_hyper_connection.", "mtp", true)...)
	out = append(out, c.moeSpecs(MTPPrefix+"mlp.", "mtp")...)
	return out
}

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

func at(where, name string) string {
	if where == "" {
		return "tensor " + name
	}
	return where + ": tensor " + name
}

// load reads one float tensor and checks its shape.
func (r resolver) load(s spec) (lm.Tensor, error) {
	n := r.name(s.name)
	if n == "" {
		return lm.Tensor{}, fmt.Errorf("%s: missing from the checkpoint", at(s.where, s.name))
	}
	info, err := r.ck.Info(n)
	if err != nil {
		return lm.Tensor{}, fmt.Errorf("%s: %w", at(s.where, s.name), err)
	}
	if !slices.Equal(info.Shape, s.shape) {
		return lm.Tensor{}, fmt.Errorf("%s: shape %v, want %v", at(s.where, s.name), info.Shape, s.shape)
	}
	if !info.DType.IsFloat() {
		return lm.Tensor{}, fmt.Errorf("%s: dtype %s, want f32, f16 or bf16", at(s.where, s.name), info.DType)
	}
	data, err := r.ck.Bytes(n)
	if err != nil {
		return lm.Tensor{}, fmt.Errorf("%s: %w", at(s.where, s.name), err)
	}
	return lm.Tensor{DType: info.DType, Shape: s.shape, Data: data}, nil
}

// offsetNorms are the endings of the names of the RMS norm weights a
// checkpoint stores as offsets from one (the norm applies 1 + w); every
// other norm weight (the GDN's gated norm) is used as stored.
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

// foldOnePlus gives 1 + w in f32, as transformers computes it, for an
// offset norm's weight w (graphs apply it with rmsnorm); a tensor of
// shapes only stays so, in f32.
func foldOnePlus(t lm.Tensor) lm.Tensor {
	if t.Data == nil {
		return lm.Tensor{DType: graph.F32, Shape: t.Shape}
	}
	v := make([]float32, t.Len())
	switch t.DType {
	case graph.BF16:
		half.DecodeBF16(v, t.Data)
	case graph.F16:
		half.DecodeF16(v, t.Data)
	default:
		half.DecodeF32(v, t.Data)
	}
	for i := range v {
		v[i]++
	}
	return lm.F32Tensor(v, t.Shape...)
}

// keep stores a loaded tensor under its graph name, an offset norm's
// folded into 1 + w.
func (m *Model) keep(name string, t lm.Tensor) {
	if isOffsetNorm(name) {
		t = foldOnePlus(t)
	}
	m.tensors[name] = t
}

func fromCheckpoint(c Config, ck *weights.Checkpoint) (*Model, error) {
	m := &Model{Config: c, ckpt: ck, tensors: lm.Tensors{}, ple: map[int]ops.PLEHashAttrs{}, shards: map[int][]string{}}
	r := newResolver(ck)
	for _, s := range c.specs() {
		t, err := r.load(s)
		if err != nil {
			return nil, err
		}
		m.keep(s.name, t)
	}
	for li := range c.Layers {
		where := fmt.Sprintf("layer %d", li)
		if err := m.loadExperts(r, LayerPrefix(li), where); err != nil {
			return nil, err
		}
		if c.HasPLE(li) {
			if err := m.loadPLE(r, li, where); err != nil {
				return nil, err
			}
		}
	}
	if c.MTPLayers > 0 && r.name("mtp.fc_hidden.weight") != "" {
		for _, s := range c.mtpSpecs() {
			t, err := r.load(s)
			if err != nil {
				return nil, err
			}
			m.keep(s.name, t)
		}
		if err := m.loadExperts(r, MTPPrefix, "mtp"); err != nil {
			return nil, err
		}
		m.HasMTP = true
	}
	return m, nil
}

// loadExperts takes a layer's stacked expert tensors, or stacks the
// per-expert ones (mlp.experts.{e}.{gate,up,down}_proj.weight) into them.
func (m *Model) loadExperts(r resolver, pre, where string) error {
	c := &m.Config
	e, f, h := c.Experts, c.ExpertFFN, c.Hidden
	gu, dn := pre+ExpertsGateUp, pre+ExpertsDown
	if r.name(gu) != "" || r.name(dn) != "" {
		for _, s := range []spec{{gu, []int{e, 2 * f, h}, where}, {dn, []int{e, h, f}, where}} {
			t, err := r.load(s)
			if err != nil {
				return err
			}
			m.tensors[s.name] = t
		}
		return nil
	}
	var dt graph.DType
	stackGU := lm.Tensor{Shape: []int{e, 2 * f, h}}
	stackDn := lm.Tensor{Shape: []int{e, h, f}}
	for x := 0; x < e; x++ {
		ep := fmt.Sprintf("%smlp.experts.%d.", pre, x)
		for _, part := range []struct {
			name  string
			shape []int
			into  *lm.Tensor
		}{{ep + "gate_proj.weight", []int{f, h}, &stackGU}, {ep + "up_proj.weight", []int{f, h}, &stackGU}, {ep + "down_proj.weight", []int{h, f}, &stackDn}} {
			t, err := r.load(spec{part.name, part.shape, where})
			if err != nil {
				return err
			}
			if dt == graph.Invalid {
				dt = t.DType
				stackGU.DType, stackDn.DType = dt, dt
				stackGU.Data = make([]byte, 0, e*2*f*h*dt.Size())
				stackDn.Data = make([]byte, 0, e*h*f*dt.Size())
			}
			if t.DType != dt {
				return fmt.Errorf("%s: dtype %s, but expert 0 is %s: experts are stacked in one dtype", at(where, part.name), t.DType, dt)
			}
			part.into.Data = append(part.into.Data, t.Data...)
		}
	}
	m.tensors[gu], m.tensors[dn] = stackGU, stackDn
	return nil
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

// loadPLE reads layer li's n-gram table shards and hash constants (computed
// from the config when the checkpoint does not store them).
func (m *Model) loadPLE(r resolver, li int, where string) error {
	c := &m.Config
	nh := c.PLEHeads()
	width := c.PLEDim / nh
	mult, sizes, offs := PLEConstants(c, c.PLEIndex(li))
	pre := LayerPrefix(li)
	for _, b := range []struct {
		name string
		dst  *[]int64
	}{{pleMult, &mult}, {pleSizes, &sizes}, {pleOffsets, &offs}} {
		n := r.name(pre + b.name)
		if n == "" {
			continue
		}
		info, err := r.ck.Info(n)
		if err != nil {
			return fmt.Errorf("%s: %w", at(where, pre+b.name), err)
		}
		if info.DType != graph.I64 || len(info.Shape) != 1 || info.Shape[0] != len(*b.dst) {
			return fmt.Errorf("%s: %s %v, want i64 [%d]", at(where, pre+b.name), info.DType, info.Shape, len(*b.dst))
		}
		raw, err := r.ck.Bytes(n)
		if err != nil {
			return fmt.Errorf("%s: %w", at(where, pre+b.name), err)
		}
		for i := range *b.dst {
			(*b.dst)[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
		}
	}
	hash := ops.PLEHashAttrs{NGram: c.NGram, HeadsPerNGram: c.HeadsPerNGram, EOS: int32(c.EOS), Mult: mult, Sizes: sizes, Offsets: offs}
	need := int64(0)
	for h := range sizes {
		if sizes[h] <= 0 || offs[h] < 0 {
			return fmt.Errorf("%s: PLE head %d has table size %d at offset %d", where, h, sizes[h], offs[h])
		}
		need = max(need, offs[h]+sizes[h])
	}
	rows := 0
	var names []string
	for k := 0; c.PLEShards == 0 || k < c.PLEShards; k++ {
		name := ShardName(li, k)
		if r.name(name) == "" {
			if c.PLEShards == 0 && k > 0 {
				break
			}
			return fmt.Errorf("%s: missing from the checkpoint", at(where, name))
		}
		info, err := r.ck.Info(r.name(name))
		if err != nil {
			return fmt.Errorf("%s: %w", at(where, name), err)
		}
		if len(info.Shape) != 2 || info.Shape[1] != width || info.Shape[0] <= 0 {
			return fmt.Errorf("%s: shape %v, want [rows, %d] (ple_embed_dim %d over %d heads)", at(where, name), info.Shape, width, c.PLEDim, nh)
		}
		t, err := r.load(spec{name, info.Shape, where})
		if err != nil {
			return err
		}
		m.tensors[name] = t
		names = append(names, name)
		rows += info.Shape[0]
	}
	if int64(rows) < need {
		return fmt.Errorf("%s: the n-gram table's %d rows do not hold the %d its heads index", where, rows, need)
	}
	m.ple[li], m.shards[li] = hash, names
	return nil
}

// PLEConstants computes the hash constants of the PLE layer with index idx
// among the PLE layers (QWEN4.md section 7): the n multipliers, and each
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

func isPrime(n int64) bool {
	if n < 2 {
		return false
	}
	for d := int64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// PLEHash gives the hash attributes of PLE layer li (nil map entry: not a
// PLE layer).
func (m *Model) PLEHash(li int) (ops.PLEHashAttrs, bool) {
	a, ok := m.ple[li]
	return a, ok
}

// WeightDType is the stored dtype of a weight; graphs declare weights with it.
func (m *Model) WeightDType(name string) graph.DType { return m.tensors.DType(name) }

// Parameters counts the model's weights.
func (m *Model) Parameters() int { return m.tensors.Parameters() }

// Upload puts every weight on a backend and returns the buffers by graph
// weight name.
func (m *Model) Upload(be ops.Backend) (map[string]ops.Buffer, error) { return m.tensors.Upload(be) }

// Close releases the checkpoint's file mappings; the model is unusable after.
func (m *Model) Close() error {
	if m.ckpt == nil {
		return nil
	}
	err := m.ckpt.Close()
	m.ckpt = nil
	return err
}
