package ops

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/reel-runtime/reel/graph"
)

// Fused ops that only the planner makes. Model code never builds them: the
// planner's fusion rules find their decompositions in a graph and put one
// node in their place, so each keeps a Decompose the fused plan is checked
// against.

// plannerDefs are the fused ops of the planner's rules; they are registered
// beside the others.
var plannerDefs = []*Def{OpMatMulSwiGLU, OpSwiGLUNormMatMul, OpNormRopeKV, OpElementwiseChain}

// OpMatMulSwiGLU is a SwiGLU MLP's gate and up projections with the gated
// activation in their epilogue.
var OpMatMulSwiGLU = &Def{
	Op: "matmul_swiglu",
	Doc: "matmul_swiglu(x[T,K], wg[F,K], wu[F,K], sg[F], su[F]) = silu((x·wgᵀ) ⊙ sg) ⊙ ((x·wuᵀ) ⊙ su): " +
		"the gate and up projections of one input in one pass over x, the scales and the gated activation applied to their outputs.",
	Arity: 5,
	Rule: func(_ any, in []*graph.Value) (graph.Signature, error) {
		g, err := OpMatMul.Rule(nil, []*graph.Value{in[0], in[1]})
		if err != nil {
			return graph.Signature{}, fmt.Errorf("gate: %w", err)
		}
		u, err := OpMatMul.Rule(nil, []*graph.Value{in[0], in[2]})
		if err != nil {
			return graph.Signature{}, fmt.Errorf("up: %w", err)
		}
		gv, uv := specValue(g.Outputs[0]), specValue(u.Outputs[0])
		return OpSwiGLU.Rule(nil, []*graph.Value{gv, uv, in[3], in[4]})
	},
	Decompose: func(b *graph.Builder, _ any, in []*graph.Value) []*graph.Value {
		g := MatMul(b, in[0], in[1])
		u := MatMul(b, in[0], in[2])
		return []*graph.Value{SwiGLU(b, g, u, in[3], in[4])}
	},
}

// OpSwiGLUNormMatMul is a whole SwiGLU MLP whose gated activation is
// l2-normalized before the down projection (Dory's): matmul_swiglu, then
// norm_matmul of its output. As one node a backend never writes the gated
// activation in f32: on the CUDA backend a prompt chunk's activation goes
// straight from the gate and up products to the down product's 16-bit input.
var OpSwiGLUNormMatMul = &Def{
	Op: "swiglu_norm_matmul",
	Doc: "swiglu_norm_matmul(x[T,K], wg[F,K], wu[F,K], sg[F], su[F], wd[N,F]) = norm_matmul(matmul_swiglu(x, wg, wu, sg, su), wd): " +
		"a SwiGLU MLP with the gated activation's rows l2-normalized (Eps) before the down projection, the activation never stored.",
	Arity: 6,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[EpsAttrs]("swiglu_norm_matmul", a)
		if err != nil {
			return graph.Signature{}, err
		}
		sig, err := OpMatMulSwiGLU.Rule(nil, in[:5])
		if err != nil {
			return graph.Signature{}, err
		}
		sig, err = OpNormMatMul.Rule(at, []*graph.Value{specValue(sig.Outputs[0]), in[5]})
		if err != nil {
			return graph.Signature{}, fmt.Errorf("down: %w", err)
		}
		return sig, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[EpsAttrs](b, "swiglu_norm_matmul", a)
		if !ok {
			return failed(1)
		}
		y := OpMatMulSwiGLU.Decompose(b, nil, in[:5])[0]
		return []*graph.Value{MatMul(b, L2Norm(b, y, 0, at.Eps), in[5])}
	},
}

// NormRopeKVAttrs are the attributes of norm_rope_kv.
type NormRopeKVAttrs struct {
	NormRope NormRopeAttrs
	Slot     SlotAttrs
}

// OpNormRopeKV prepares key rows and writes them into their slot.
var OpNormRopeKV = &Def{
	Op: "norm_rope_kv",
	Doc: "norm_rope_kv(x[T, H·d], call, slot[cap, H·d][, s[H·d]]) writes norm_rope(x, call[, s]) into the slot as kv_write does " +
		"(row t at position call[pos] + t, Ring: mod cap): rotary, per-head norm, scale and the KV row write in one step. It makes no output.",
	Arity: -1,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[NormRopeKVAttrs]("norm_rope_kv", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if len(in) != 3 && len(in) != 4 {
			return graph.Signature{}, fmt.Errorf("norm_rope_kv takes x, call, slot and an optional scale, got %d inputs", len(in))
		}
		nrIn := []*graph.Value{in[0], in[1]}
		if len(in) == 4 {
			nrIn = append(nrIn, in[3])
		}
		sig, err := OpNormRope.Rule(at.NormRope, nrIn)
		if err != nil {
			return graph.Signature{}, err
		}
		if _, err := OpKVWrite.Rule(at.Slot, []*graph.Value{specValue(sig.Outputs[0]), in[2], in[1]}); err != nil {
			return graph.Signature{}, err
		}
		return graph.Signature{Writes: []int{2}}, nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[NormRopeKVAttrs](b, "norm_rope_kv", a)
		if !ok {
			return nil
		}
		var scale *graph.Value
		if len(in) == 4 {
			scale = in[3]
		}
		KVWrite(b, NormRope(b, in[0], in[1], scale, at.NormRope), in[2], in[1], at.Slot)
		return nil
	},
}

// NormRopeKV writes norm_rope(x) into slot as one node; scale may be nil.
// Model code builds the primitive chain instead and lets the planner fuse it;
// this constructor is for tests and for the planner itself.
func NormRopeKV(b *graph.Builder, x, call, slot, scale *graph.Value, a NormRopeKVAttrs) {
	in := []*graph.Value{x, call, slot}
	if scale != nil {
		in = append(in, scale)
	}
	b.Apply(OpNormRopeKV, a, 0, in...)
}

// ChainStep is one elementwise op of a chain. Each argument is an input of
// the chain (index ≥ 0) or the result of an earlier step s (written -1-s, see
// StepArg).
type ChainStep struct {
	// Op is add, sub, mul, sigmoid, silu or scale.
	Op   string
	Args []int
	// Factor is scale's factor.
	Factor float32 `json:",omitempty"`
}

// StepArg is the argument that names the result of step s.
func StepArg(s int) int { return -1 - s }

// ChainAttrs are the attributes of elementwise_chain: its steps in order;
// the last step's result is the output.
type ChainAttrs struct {
	Steps []ChainStep
}

// String writes the chain as dumps show it: s0=mul(in0,in1) s1=silu(s0).
func (a ChainAttrs) String() string {
	var sb strings.Builder
	for i, s := range a.Steps {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString("s" + strconv.Itoa(i) + "=" + s.Op + "(")
		for j, x := range s.Args {
			if j > 0 {
				sb.WriteByte(',')
			}
			if x >= 0 {
				sb.WriteString("in" + strconv.Itoa(x))
			} else {
				sb.WriteString("s" + strconv.Itoa(-1-x))
			}
		}
		if s.Op == OpScale.Op {
			sb.WriteString("," + strconv.FormatFloat(float64(s.Factor), 'g', -1, 32))
		}
		sb.WriteByte(')')
	}
	return sb.String()
}

// ChainOps are the elementwise ops an elementwise_chain may hold, by name
// (ElementwiseOps).
var ChainOps = func() map[string]*Def {
	m := map[string]*Def{}
	for _, d := range ElementwiseOps {
		m[d.Op] = d
	}
	return m
}()

// stepAttrs gives the attributes a primitive node of a chain step carries.
func (s ChainStep) stepAttrs() any {
	if s.Op == OpScale.Op {
		return ScaleAttrs{Factor: s.Factor}
	}
	return nil
}

// ChainShapes checks a chain against its inputs and gives each step's
// result spec (the last is the output's).
func ChainShapes(a ChainAttrs, in []*graph.Value) ([]graph.Spec, error) {
	if len(a.Steps) == 0 {
		return nil, fmt.Errorf("elementwise_chain has no steps")
	}
	used := make([]bool, len(in))
	specs := make([]graph.Spec, len(a.Steps))
	for i, s := range a.Steps {
		d, ok := ChainOps[s.Op]
		if !ok {
			return nil, fmt.Errorf("step %d: %q is not an elementwise op", i, s.Op)
		}
		if len(s.Args) != d.Arity {
			return nil, fmt.Errorf("step %d: %s takes %d arguments, got %d", i, s.Op, d.Arity, len(s.Args))
		}
		args := make([]*graph.Value, len(s.Args))
		for j, x := range s.Args {
			switch {
			case x >= 0 && x < len(in):
				args[j], used[x] = in[x], true
			case x < 0 && -1-x < i:
				args[j] = specValue(specs[-1-x])
			default:
				return nil, fmt.Errorf("step %d: argument %d refers to %d, neither an input nor an earlier step", i, j, x)
			}
		}
		sig, err := d.Rule(s.stepAttrs(), args)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i, err)
		}
		specs[i] = sig.Outputs[0]
	}
	for i, u := range used {
		if !u {
			return nil, fmt.Errorf("input %d %s is not used by any step", i, in[i])
		}
	}
	return specs, nil
}

// OpElementwiseChain is a tree of elementwise ops in one pass.
var OpElementwiseChain = &Def{
	Op: "elementwise_chain",
	Doc: "elementwise_chain(in...) evaluates Steps in order, each an elementwise op (add, sub, mul, sigmoid, silu, scale) of inputs and earlier steps' results, " +
		"with the usual broadcast of a second operand over the first's leading dimensions; the last step's result is the output. One pass, no intermediate in memory.",
	Arity: -1, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[ChainAttrs]("elementwise_chain", a)
		if err != nil {
			return graph.Signature{}, err
		}
		specs, err := ChainShapes(at, in)
		if err != nil {
			return graph.Signature{}, err
		}
		last := specs[len(specs)-1]
		return one(last.DType, last.Shape), nil
	},
	Decompose: func(b *graph.Builder, a any, in []*graph.Value) []*graph.Value {
		at, ok := attrsIn[ChainAttrs](b, "elementwise_chain", a)
		if !ok {
			return failed(1)
		}
		res := make([]*graph.Value, len(at.Steps))
		for i, s := range at.Steps {
			args := make([]*graph.Value, len(s.Args))
			for j, x := range s.Args {
				if x >= 0 {
					args[j] = in[x]
				} else {
					args[j] = res[-1-x]
				}
			}
			res[i] = apply1(b, ChainOps[s.Op], s.stepAttrs(), args...)
		}
		return []*graph.Value{res[len(res)-1]}
	},
}

// specValue stands for a value of the given spec when a rule is reused on an
// intermediate that has no value of its own.
func specValue(s graph.Spec) *graph.Value {
	return &graph.Value{ID: -1, Name: "intermediate", DType: s.DType, Shape: s.Shape, Kind: graph.Temp}
}
