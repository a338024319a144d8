package ops

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
)

// PLE, the hashed n-gram side input of a layer (X the hyper-state [T, C·H]):
//
//	e  = ngram_embed(ple_hash(ids, hist, call), shards...)
//	kn = rmsnorm(e·W_keyᵀ, norm_key; H); qn = rmsnorm(X, norm_query; H)
//	gv = ple_gate(kn, qn, e·W_valueᵀ)
//	X  = X + gv + causal_conv(rmsnorm(gv, norm_conv; H), conv, ring, call; dilation ngram_size, silu)

// PLEHashAttrs are the attributes of ple_hash: the layer's hash constants,
// which the checkpoint stores as the i64 buffers layer_multipliers,
// ngram_heads_vocab_sizes and ngram_heads_offsets (the model reads them at
// load).
type PLEHashAttrs struct {
	// NGram is ngram_size n: orders 2..n are hashed.
	NGram int
	// HeadsPerNGram is the table heads of each order.
	HeadsPerNGram int
	// EOS is the end-of-sequence id (the first one when the config lists several).
	EOS int32
	// Mult are the n multipliers m_s.
	Mult []int64
	// Sizes are the N = (n−1)·HeadsPerNGram heads' table sizes P_h (primes).
	Sizes []int64
	// Offsets are the heads' first rows in the table.
	Offsets []int64
}

func (a PLEHashAttrs) check() error {
	if a.NGram < 2 || a.HeadsPerNGram <= 0 {
		return fmt.Errorf("ple_hash: ngram size %d must be at least 2 and heads per n-gram %d positive", a.NGram, a.HeadsPerNGram)
	}
	nh := (a.NGram - 1) * a.HeadsPerNGram
	if len(a.Mult) != a.NGram || len(a.Sizes) != nh || len(a.Offsets) != nh {
		return fmt.Errorf("ple_hash: %d multipliers, %d sizes, %d offsets; want %d, %d, %d", len(a.Mult), len(a.Sizes), len(a.Offsets), a.NGram, nh, nh)
	}
	for h := range a.Sizes {
		if a.Sizes[h] <= 0 || a.Offsets[h] < 0 || a.Offsets[h] > math.MaxInt32-(a.Sizes[h]-1) {
			return fmt.Errorf("ple_hash: head %d has table size %d at offset %d: rows must be positive and fit i32", h, a.Sizes[h], a.Offsets[h])
		}
	}
	return nil
}

// OpPLEHash maps each token's n-gram history to embedding table rows.
var OpPLEHash = &Def{
	Op: "ple_hash",
	Doc: "ple_hash(ids i32[T], hist i32[n−1], call) = rows i32[T, N], N = (n−1)·HeadsPerNGram, writing hist: row t < n_rows (the call's " +
		"rows) at position p = call[pos] + t; tok(j) = ids[j − call[pos]] for j ≥ call[pos], hist[j mod (n−1)] for 0 ≤ j < call[pos], " +
		"EOS for j < 0; t_s = EOS when some tok(j), p − s ≤ j < p, is EOS, else tok(p − s) (t_0 = tok(p)); for order o = 2..n, " +
		"mix_o = XOR_{s<o} t_s·Mult[s] (int64, wrapping) and head h = (o−2)·HeadsPerNGram + i gets rows[t, h] = " +
		"(mix_o mod Sizes[h], non-negative) + Offsets[h]. Then hist keeps the last n−1 tokens by position. Rows t ≥ n_rows are 0.",
	Arity: 3,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[PLEHashAttrs]("ple_hash", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := at.check(); err != nil {
			return graph.Signature{}, err
		}
		ids := in[0]
		if ids.DType != graph.I32 || len(ids.Shape) != 1 {
			return graph.Signature{}, fmt.Errorf("ids %s must be i32 [rows]", ids)
		}
		if err := checkState("hist", in[1], graph.I32, at.NGram-1); err != nil {
			return graph.Signature{}, err
		}
		if err := checkCall(in[2]); err != nil {
			return graph.Signature{}, err
		}
		nh := (at.NGram - 1) * at.HeadsPerNGram
		return graph.Signature{Outputs: []graph.Spec{{DType: graph.I32, Shape: graph.Shape{ids.Shape[0], nh}}}, Writes: []int{1}}, nil
	},
}

// PLEHash gives each row's n-gram table rows, keeping the token history in hist.
func PLEHash(b *graph.Builder, ids, hist, call *graph.Value, a PLEHashAttrs) *graph.Value {
	return apply1(b, OpPLEHash, a, ids, hist, call)
}

// OpNGramEmbed gathers several table rows per token.
var OpNGramEmbed = &Def{
	Op: "ngram_embed",
	Doc: "ngram_embed(rows i32[T, N], shard_0[R_0, w], shard_1[R_1, w], ...) = e[T, N·w], e[t, h·w : (h+1)·w] = Table[rows[t, h]] as f32, " +
		"Table the shards' rows one after another (the checkpoint stores the n-gram table in row chunks). A row id outside the table is " +
		"an error at run time.",
	Arity: -1,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		if len(in) < 2 {
			return graph.Signature{}, fmt.Errorf("ngram_embed takes row ids and at least one table shard, got %d inputs", len(in))
		}
		rows := in[0]
		if rows.DType != graph.I32 || len(rows.Shape) != 2 {
			return graph.Signature{}, fmt.Errorf("rows %s must be i32 [tokens, heads]", rows)
		}
		w := -1
		for i, s := range in[1:] {
			if err := wantWeightType(fmt.Sprintf("shard %d", i), s); err != nil {
				return graph.Signature{}, err
			}
			if len(s.Shape) != 2 || (w >= 0 && s.Shape[1] != w) || s.Shape[1] <= 0 {
				return graph.Signature{}, fmt.Errorf("shard %d %s must be [rows, width > 0], the width of shard 0 %s", i, s, in[1])
			}
			w = s.Shape[1]
		}
		return one(graph.F32, graph.Shape{rows.Shape[0], rows.Shape[1] * w}), nil
	},
}

// NGramEmbed gathers the rows of the sharded table for every (token, head).
func NGramEmbed(b *graph.Builder, rows *graph.Value, shards ...*graph.Value) *graph.Value {
	return apply1(b, OpNGramEmbed, nil, append([]*graph.Value{rows}, shards...)...)
}

// OpPLEGate gates the PLE value into every stream.
var OpPLEGate = &Def{
	Op: "ple_gate",
	Doc: "ple_gate(kn[T, C·H], qn[T, C·H], v[T, H]) = gv[T, C·H]: per stream c, γ_c = kn_c·qn_c / sqrt(H), γ_c = sign(γ_c)·sqrt(max(|γ_c|, 1e-6)) " +
		"(0 stays 0), gv_c = sigmoid(γ_c)·v; f32.",
	Arity: 3,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		c, err := streamsOf("ple_gate", a)
		if err != nil {
			return graph.Signature{}, err
		}
		h, err := hcStreams("kn", in[0], c)
		if err != nil {
			return graph.Signature{}, err
		}
		if !in[1].Shape.Equal(in[0].Shape) || in[1].DType != graph.F32 {
			return graph.Signature{}, fmt.Errorf("qn %s must be f32 of the shape of kn %s", in[1], in[0])
		}
		if err := checkRows("v", in[2], h); err != nil {
			return graph.Signature{}, fmt.Errorf("%w (kn is %s)", err, in[0])
		}
		if err := sameRows(in...); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, in[0].Shape), nil
	},
}

// PLEGate is sigmoid(signed sqrt(kn_c·qn_c / sqrt(H))) · v for every stream c.
func PLEGate(b *graph.Builder, kn, qn, v *graph.Value, streams int) *graph.Value {
	return apply1(b, OpPLEGate, StreamAttrs{Streams: streams}, kn, qn, v)
}
