package qwen4

import (
	"encoding/binary"
	"fmt"
	"github.com/reel-runtime/reel/lm"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/weights"
	"github.com/reel-runtime/reel/weights/weightstest"
)

// hostileBudget bounds one hostile case: Load, a session and a one-token
// forward of the tiny checkpoint (3 MB) allocate some tens of MB.
var hostileBudget = weightstest.Budget{Time: 20 * time.Second, Alloc: 96 << 20}

var tinyDir = filepath.Join(testdata, "qwen4-tiny-small-11")

// loadAndForward is what `reel logits` does: Load, a CPU session, one
// token's forward.
func loadAndForward(dir string) ([]float32, error) {
	m, err := Load(dir)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	s, err := NewSession(m, Options{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	defer s.Close()
	d, err := s.Forward([]int{3}, 0, lm.WantLast)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return d.Data().([]float32), nil
}

// TestHostileConfigs loads copies of the tiny checkpoint whose config.json
// has every numeric field set to every extreme value (weightstest's: zero,
// negatives, fractions, int64 and float64 extremes, overflowing products,
// NaN and infinities, wrong types), the cases (n-gram products that
// wrap to 0, a base whose prime search overflowed, a types layer types)
// and hostile files, then runs a token: each gives an error naming the
// folder and the field (or a tensor), or finite logits, within a time and
// allocation budget.
func TestHostileConfigs(t *testing.T) {
	// 700000 entries: 13 MB, under weights.MaxConfigLen
	types := "[" + strings.TrimSuffix(strings.Repeat(`"linear_attention",`, 700000), ",") + "]"
	cases := []weightstest.ConfigCase{
		{Name: "n-gram heads wrap to 0", Fields: map[string]string{"ngram_size": "4294967297", "heads_per_ngram": "4294967296"},
			Want: []string{"ngram_size", "heads_per_ngram"}},
		{Name: "n-gram heads wrap to the checkpoint's 4", Fields: map[string]string{"ngram_size": "4611686018427387906", "heads_per_ngram": "4"},
			Want: []string{"ngram_size"}},
		{Name: "n-gram base near 2^63", Fields: map[string]string{"ngram_vocab_size_base": "9223372036854775783"},
			Want: []string{"ngram_vocab_size_base"}},
		{Name: "n-gram base 1e18", Fields: map[string]string{"ngram_vocab_size_base": "1000000000000000000"},
			Want: []string{"ngram_vocab_size_base"}},
		{Name: "n-gram base at the limit", Fields: map[string]string{"ngram_vocab_size_base": fmt.Sprint(MaxNGramBase)},
			Want: []string{"n-gram table"}},
		{Name: "700000 layer types", Fields: map[string]string{"layer_types": types, "num_hidden_layers": "1000000"},
			Want: []string{"num_hidden_layers", "layer_types"}},
		{Name: "700000 layer types, 8 layers", Fields: map[string]string{"layer_types": types},
			Want: []string{"layer_types"}},
		{Name: "a million experts", Fields: map[string]string{"num_experts": "1000000"}, Want: []string{"tensor"}},
		{Name: "experts × width wraps", Fields: map[string]string{"num_experts": "16777216", "moe_intermediate_size": "16777216", "hidden_size": "16777216"},
			Want: []string{"num_experts"}},
		{Name: "conv channels wrap", Fields: map[string]string{
			"linear_num_key_heads": "16777216", "linear_key_head_dim": "16777216", "linear_num_value_heads": "16777216",
		}, Want: []string{"linear_"}},
		{Name: "a billion-block budget", Fields: map[string]string{"indexer_budget": "1073741824"}, Want: []string{"indexer_budget"}},
		{Name: "rms_norm_eps 1e300", Fields: map[string]string{"rms_norm_eps": "1e300"}, Want: []string{"rms_norm_eps"}},
		{Name: "rope theta 1e-300", Fields: map[string]string{"rope_parameters.rope_theta": "1e-300"}, Want: []string{"rope_theta"}},
		{Name: "text_config of 700000 layer types", Fields: map[string]string{"text_config": `{"layer_types": ` + types + `}`},
			Want: []string{"layer_types", "num_hidden_layers", "vocab_size"}},
	}
	cases = append(cases, weightstest.FileCases()...)
	cases = append(cases, tensorCases...)
	for _, c := range weightstest.FieldCases(t, filepath.Join(tinyDir, "config.json")) {
		// the n-gram table's rows are checked against the heads' sizes
		c.Want = append(c.Want, "n-gram table")
		cases = append(cases, c)
	}
	weightstest.Probe(t, tinyDir, hostileBudget, cases, loadAndForward)
}

// setInt64s sets an i64 tensor's first elements.
func setInt64s(vs ...int64) func(*weights.NamedTensor) {
	return func(nt *weights.NamedTensor) {
		for i, v := range vs {
			binary.LittleEndian.PutUint64(nt.Data[8*i:], uint64(v))
		}
	}
}

const pleConst = "model.layers.1.ple.ple_embedding."

// tensorCases are hostile tensors of a checkpoint whose config is good.
var tensorCases = []weightstest.ConfigCase{
	{Name: "tensor: a norm in i32", Setup: modeltest.EditTensor(tinyDir, "model.layers.3.self_attn.q_norm.weight", func(nt *weights.NamedTensor) {
		nt.DType = graph.I32
	}), Want: []string{"q_norm.weight: dtype i32"}},
	{Name: "tensor: an expert in f16", Setup: modeltest.EditTensor(tinyDir, "model.layers.0.mlp.experts.1.up_proj.weight", func(nt *weights.NamedTensor) {
		nt.DType, nt.Shape = graph.F16, []int{nt.Shape[0], 2 * nt.Shape[1]}
	}), Want: []string{"experts.1.up_proj.weight"}},
	{Name: "tensor: PLE table size negative", Setup: modeltest.EditTensor(tinyDir, pleConst+"ngram_heads_vocab_sizes", setInt64s(-5)),
		Want: []string{"PLE head 0"}},
	{Name: "tensor: PLE table offset past the table", Setup: modeltest.EditTensor(tinyDir, pleConst+"ngram_heads_offsets", setInt64s(1<<40)),
		Want: []string{"n-gram table"}},
	{Name: "tensor: PLE offset + size overflow", Setup: modeltest.Rewrite(tinyDir, func(ts []weights.NamedTensor) []weights.NamedTensor {
		for i := range ts {
			switch ts[i].Name {
			case pleConst + "ngram_heads_vocab_sizes":
				setInt64s(1 << 62)(&ts[i])
			case pleConst + "ngram_heads_offsets":
				setInt64s(1 << 62)(&ts[i])
			}
		}
		return ts
	}), Want: []string{"n-gram table", "PLE head 0", "head 0 has table size"}},
	{Name: "tensor: routers of 16384 experts, 8 experts stored", Fields: map[string]string{"num_experts": "16384"},
		Setup: modeltest.Rewrite(tinyDir, func(ts []weights.NamedTensor) []weights.NamedTensor {
			for i := range ts {
				if strings.HasSuffix(ts[i].Name, ".mlp.gate.weight") {
					ts[i].Shape = []int{16384, ts[i].Shape[1]}
					ts[i].Data = make([]byte, 4*16384*ts[i].Shape[1])
				}
			}
			return ts
		}), Want: []string{"experts.8."},
	},
	{Name: "tensor: file cut short", Setup: func(t testing.TB, dir string) {
		if err := os.Truncate(filepath.Join(dir, weights.SingleFile), 3000000); err != nil {
			t.Fatal(err)
		}
	}, Want: []string{weights.SingleFile}},
}
