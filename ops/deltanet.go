package ops

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
)

// Gated DeltaNet, one layer (u the block input [T, H]; nk key heads of dk,
// nv value heads of dv):
//
//	mix      = causal_conv(u·W_qkvᵀ, conv, ring, call; silu)    [T, 2·nk·dk + nv·dv]
//	q, k, v  = GDNPrep(mix)                                       split, l2norm, scale
//	g, beta  = gdn_gates(u·W_aᵀ, u·W_bᵀ, A_log, dt_bias)
//	o        = gdn_scan(q, k, v, g, beta, S, call)                writes S
//	y        = gated_rmsnorm(o, u·W_zᵀ, norm; dv, sigmoid) · W_outᵀ

// SplitAttrs describe how split cuts the rows of its input.
type SplitAttrs struct {
	// Heads is the number of times the pattern repeats in a row (1: a plain
	// column split).
	Heads int
	// Parts are the widths of the pieces of one repetition.
	Parts []int
}

// OpSplit cuts each row into pieces.
var OpSplit = &Def{
	Op: "split",
	Doc: "split(x[..., Heads·P]), P = Σ Parts: each row is Heads repetitions of [part 0 | part 1 | ...]; output k gathers part k of every " +
		"repetition, [..., Heads·Parts[k]]. Heads 1 is a plain column split (GDN's [q | k | v], the indexer's [q | k]); QSA's q_proj " +
		"output is Heads repetitions of [q_h | gate_h].",
	Arity: 1,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[SplitAttrs]("split", a)
		if err != nil {
			return graph.Signature{}, err
		}
		x := in[0]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		if at.Heads <= 0 || len(at.Parts) == 0 {
			return graph.Signature{}, fmt.Errorf("split %s: %d heads of parts %v", x, at.Heads, at.Parts)
		}
		p := 0
		for _, w := range at.Parts {
			if w <= 0 {
				return graph.Signature{}, fmt.Errorf("split %s: part widths %v must be positive", x, at.Parts)
			}
			p += w
		}
		if len(x.Shape) == 0 || x.Shape.Last() != at.Heads*p {
			return graph.Signature{}, fmt.Errorf("split %s: rows must be %d heads × %d (parts %v)", x, at.Heads, p, at.Parts)
		}
		var sig graph.Signature
		for _, w := range at.Parts {
			s := append(graph.Shape(nil), x.Shape...)
			s[len(s)-1] = at.Heads * w
			sig.Outputs = append(sig.Outputs, graph.Spec{DType: graph.F32, Shape: s})
		}
		return sig, nil
	},
}

// Split cuts each row of x, heads repetitions of parts, into one value per part.
func Split(b *graph.Builder, x *graph.Value, heads int, parts ...int) []*graph.Value {
	return b.Apply(OpSplit, SplitAttrs{Heads: heads, Parts: append([]int(nil), parts...)}, len(parts), x)
}

// ConvAttrs are the attributes of causal_conv.
type ConvAttrs struct {
	// Dilation is the step between the taps (1: adjacent positions).
	Dilation int
	// Act is applied to each output (ActIdentity or ActSiLU).
	Act Activation
}

// OpCausalConv is a causal depthwise convolution that keeps its history in a ring.
var OpCausalConv = &Def{
	Op: "causal_conv",
	Doc: "causal_conv(x[T, C], w[C, K] or [C, 1, K], ring[R, C], call), R = (K−1)·Dilation, n = the call's rows: row t < n at position " +
		"p = call[pos] + t gives y[t, c] = act(Σ_k w[c, k] · x̃(p − (K−1−k)·Dilation, c)) where x̃(j) = x[j − call[pos]] for j ≥ call[pos], " +
		"ring[j mod R] for 0 ≤ j < call[pos] and 0 for j < 0 (zero left padding: a sequence starting at position 0 ignores the ring). " +
		"Then ring[j mod R] = x̃(j) for the positions j of this call among the last R; rows t ≥ n are 0. " +
		"GDN's short conv (Dilation 1, silu) and PLE's dilated conv (Dilation = ngram_size).",
	Arity: 4,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[ConvAttrs]("causal_conv", a)
		if err != nil {
			return graph.Signature{}, err
		}
		x, w, ring := in[0], in[1], in[2]
		if at.Dilation <= 0 || (at.Act != ActIdentity && at.Act != ActSiLU) {
			return graph.Signature{}, fmt.Errorf("causal_conv: dilation %d must be positive, act %q identity or silu", at.Dilation, at.Act)
		}
		if err := checkRows("x", x, -1); err != nil {
			return graph.Signature{}, err
		}
		if err := checkCall(in[3]); err != nil {
			return graph.Signature{}, err
		}
		c := x.Shape[1]
		if err := wantWeightType("w", w); err != nil {
			return graph.Signature{}, err
		}
		k := w.Shape.Last()
		okW := (len(w.Shape) == 2 && w.Shape[0] == c) || (len(w.Shape) == 3 && w.Shape[0] == c && w.Shape[1] == 1)
		if !okW || k < 2 {
			return graph.Signature{}, fmt.Errorf("x %s, w %s: w must be [%d, K] or [%d, 1, K] with K ≥ 2", x, w, c, c)
		}
		if err := checkState("ring", ring, graph.F32, (k-1)*at.Dilation, c); err != nil {
			return graph.Signature{}, fmt.Errorf("%w ((K−1)·dilation rows for w %s)", err, w)
		}
		return graph.Signature{Outputs: []graph.Spec{{DType: graph.F32, Shape: x.Shape}}, Writes: []int{2}}, nil
	},
}

// CausalConv is the causal depthwise convolution of x with w, its history in ring.
func CausalConv(b *graph.Builder, x, w, ring, call *graph.Value, a ConvAttrs) *graph.Value {
	return apply1(b, OpCausalConv, a, x, w, ring, call)
}

// GDNPrepAttrs are the attributes of gdn_prep.
type GDNPrepAttrs struct {
	KeyHeads, KeyDim, ValueHeads, ValueDim int
	// Eps is added to the sum of squares of each query and key head (1e-6).
	Eps float32
}

func (a GDNPrepAttrs) check() error {
	if err := checkPositive("gdn_prep", "key heads", a.KeyHeads, "key dim", a.KeyDim, "value heads", a.ValueHeads, "value dim", a.ValueDim); err != nil {
		return err
	}
	if a.ValueHeads%a.KeyHeads != 0 {
		return fmt.Errorf("gdn_prep: %d value heads are not a multiple of %d key heads", a.ValueHeads, a.KeyHeads)
	}
	return nil
}

// OpGDNPrep splits the convolved projection into GDN's normalized queries,
// keys and values.
var OpGDNPrep = &Def{
	Op: "gdn_prep",
	Doc: "gdn_prep(mix[T, 2·nk·dk + nv·dv]) = (q̂, k̂, v): mix's columns are [q (nk heads of dk) | k (nk·dk) | v (nv heads of dv)]; " +
		"per head q̂_h = q_h / sqrt(Σ q_h² + Eps) / sqrt(dk), k̂_h = k_h / sqrt(Σ k_h² + Eps), v unchanged. " +
		"Decomposes into split, l2norm and scale.",
	Arity: 1,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[GDNPrepAttrs]("gdn_prep", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := at.check(); err != nil {
			return graph.Signature{}, err
		}
		kd, vd := at.KeyHeads*at.KeyDim, at.ValueHeads*at.ValueDim
		x := in[0]
		if err := checkRows("mix", x, 2*kd+vd); err != nil {
			return graph.Signature{}, err
		}
		t := x.Shape[0]
		return graph.Signature{Outputs: []graph.Spec{
			{DType: graph.F32, Shape: graph.Shape{t, kd}},
			{DType: graph.F32, Shape: graph.Shape{t, kd}},
			{DType: graph.F32, Shape: graph.Shape{t, vd}},
		}}, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at := a.(GDNPrepAttrs)
		kd := at.KeyHeads * at.KeyDim
		p := Split(b, in[0], 1, kd, kd, at.ValueHeads*at.ValueDim)
		q := Scale(b, L2Norm(b, p[0], at.KeyDim, at.Eps), float32(1/math.Sqrt(float64(at.KeyDim))))
		k := L2Norm(b, p[1], at.KeyDim, at.Eps)
		return []*graph.Value{q, k, p[2]}
	},
}

// GDNPrep builds gdn_prep's primitive chain (split, per-head l2norm, the
// query scale) over the convolved projection; the planner fuses it.
func GDNPrep(b *graph.Builder, mix *graph.Value, a GDNPrepAttrs) (q, k, v *graph.Value) {
	out := OpGDNPrep.Decompose(b, a, []*graph.Value{mix})
	return out[0], out[1], out[2]
}

// OpGDNGates computes GDN's decay and write strength per value head.
var OpGDNGates = &Def{
	Op: "gdn_gates",
	Doc: "gdn_gates(a[T, nv], b[T, nv], A_log[nv], dt_bias[nv]) = (g, beta), both f32 [T, nv]: g = −exp(A_log) · softplus(a + dt_bias) " +
		"(the log of the state's decay), beta = sigmoid(b); softplus(x) = log(1 + exp(x)), computed stably.",
	Arity: 4,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		if err := checkRows("a", in[0], -1); err != nil {
			return graph.Signature{}, err
		}
		nv := in[0].Shape[1]
		if err := checkRows("b", in[1], nv); err != nil {
			return graph.Signature{}, fmt.Errorf("%w (a is %s)", err, in[0])
		}
		if err := sameRows(in[0], in[1]); err != nil {
			return graph.Signature{}, err
		}
		if err := checkVector("A_log", in[2], nv); err != nil {
			return graph.Signature{}, err
		}
		if err := checkVector("dt_bias", in[3], nv); err != nil {
			return graph.Signature{}, err
		}
		s := graph.Spec{DType: graph.F32, Shape: append(graph.Shape(nil), in[0].Shape...)}
		return graph.Signature{Outputs: []graph.Spec{s, {DType: graph.F32, Shape: append(graph.Shape(nil), s.Shape...)}}}, nil
	},
}

// GDNGates gives g = −exp(A_log)·softplus(a + dt_bias) and beta = sigmoid(b).
func GDNGates(b *graph.Builder, a, bl, aLog, dtBias *graph.Value) (g, beta *graph.Value) {
	out := b.Apply(OpGDNGates, nil, 2, a, bl, aLog, dtBias)
	return out[0], out[1]
}

// OpGDNScan is the gated delta rule over the call's rows.
var OpGDNScan = &Def{
	Op: "gdn_scan",
	Doc: "gdn_scan(q̂[T, nk·dk], k̂[T, nk·dk], v[T, nv·dv], g[T, nv], beta[T, nv], S[nv, dk, dv], call) = o[T, nv·dv], writing S: " +
		"value head j reads key head j / (nv/nk); S starts as zero when call[pos] = 0, else as stored; for each row t < n (the call's rows), " +
		"per head: S ← exp(g_t)·S; m = Sᵀk̂_t; S ← S + k̂_t (beta_t (v_t − m))ᵀ; o_t = Sᵀq̂_t. Rows t ≥ n are 0. f32 throughout.",
	Arity: 7,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		st := in[5]
		if st.Kind != graph.State || st.DType != graph.F32 || len(st.Shape) != 3 || st.Shape.Elems() <= 0 {
			return graph.Signature{}, fmt.Errorf("S %s must be an f32 state [value heads, key dim, value dim]", st)
		}
		nv, dk, dv := st.Shape[0], st.Shape[1], st.Shape[2]
		q, k, v, g, beta := in[0], in[1], in[2], in[3], in[4]
		if err := checkRows("q", q, -1); err != nil {
			return graph.Signature{}, err
		}
		kd := q.Shape[1]
		if kd%dk != 0 || kd == 0 || nv%(kd/dk) != 0 {
			return graph.Signature{}, fmt.Errorf("q %s, S %s: q must hold key heads of %d whose count divides %d value heads", q, st, dk, nv)
		}
		if err := checkRows("k", k, kd); err != nil {
			return graph.Signature{}, fmt.Errorf("%w (q is %s)", err, q)
		}
		if err := checkRows("v", v, nv*dv); err != nil {
			return graph.Signature{}, fmt.Errorf("%w (S is %s)", err, st)
		}
		if err := checkRows("g", g, nv); err != nil {
			return graph.Signature{}, fmt.Errorf("%w (S is %s)", err, st)
		}
		if err := checkRows("beta", beta, nv); err != nil {
			return graph.Signature{}, fmt.Errorf("%w (S is %s)", err, st)
		}
		if err := sameRows(q, k, v, g, beta); err != nil {
			return graph.Signature{}, err
		}
		if err := checkCall(in[6]); err != nil {
			return graph.Signature{}, err
		}
		return graph.Signature{Outputs: []graph.Spec{{DType: graph.F32, Shape: append(graph.Shape(nil), v.Shape...)}}, Writes: []int{5}}, nil
	},
}

// GDNScan runs the gated delta rule over the rows, updating the state S.
func GDNScan(b *graph.Builder, q, k, v, g, beta, s, call *graph.Value) *graph.Value {
	return apply1(b, OpGDNScan, nil, q, k, v, g, beta, s, call)
}

// GatedRMSNormAttrs are the attributes of gated_rmsnorm.
type GatedRMSNormAttrs struct {
	// Group is the head dimension the norm runs over.
	Group int
	Eps   float32
	// Act is the output gate's function (ActSigmoid in the release; ActSiLU
	// when a config leaves output_gate_type unset).
	Act Activation
}

// OpGatedRMSNorm is GDN's output norm with its gate.
var OpGatedRMSNorm = &Def{
	Op: "gated_rmsnorm",
	Doc: "gated_rmsnorm(o[T, N], z[T, N], w[Group]) = w ⊙ o / sqrt(mean o² + Eps) ⊙ act(z), the mean over each run of Group elements " +
		"(a value head), w used as stored (not 1 + w), f32: GDN's gated output norm.",
	Arity: 3, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[GatedRMSNormAttrs]("gated_rmsnorm", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if !at.Act.valid() {
			return graph.Signature{}, fmt.Errorf("gated_rmsnorm: unknown activation %q", at.Act)
		}
		o, z := in[0], in[1]
		if err := checkRows("o", o, -1); err != nil {
			return graph.Signature{}, err
		}
		if !z.Shape.Equal(o.Shape) || z.DType != graph.F32 {
			return graph.Signature{}, fmt.Errorf("z %s must be f32 of the shape of o %s", z, o)
		}
		if at.Group <= 0 || o.Shape[1]%at.Group != 0 {
			return graph.Signature{}, fmt.Errorf("group %d does not divide o %s", at.Group, o)
		}
		if err := checkVector("w", in[2], at.Group); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, o.Shape), nil
	},
}

// GatedRMSNorm is w ⊙ rms(o) ⊙ act(z) per run of a.Group elements.
func GatedRMSNorm(b *graph.Builder, o, z, w *graph.Value, a GatedRMSNormAttrs) *graph.Value {
	return apply1(b, OpGatedRMSNorm, a, o, z, w)
}
