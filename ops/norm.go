package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// NormAttrs are the attributes of l2norm and rmsnorm.
type NormAttrs struct {
	// Group is the length of the runs normalized on their own (a head's
	// dimension); 0 means the whole last dimension.
	Group int
	Eps   float32
}

func groupOf(a NormAttrs, x *graph.Value) (int, error) {
	n := x.Shape.Last()
	g := a.Group
	if g == 0 {
		g = n
	}
	if g <= 0 || n%g != 0 {
		return 0, fmt.Errorf("group %d does not divide the last dimension of %s", a.Group, x)
	}
	return g, nil
}

// OpL2Norm is nGPT's justnorm.
var OpL2Norm = &Def{
	Op:    "l2norm",
	Doc:   "l2norm(x) = x / sqrt(sum x² + Eps) over each run of Group elements of the last dimension (nGPT's justnorm); sums in f32.",
	Arity: 1, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[NormAttrs]("l2norm", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := wantF32("x", in[0]); err != nil {
			return graph.Signature{}, err
		}
		if _, err := groupOf(at, in[0]); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, in[0].Shape), nil
	},
}

// L2Norm is x / sqrt(Σx² + eps) over runs of group elements (0: the whole row).
func L2Norm(b *graph.Builder, x *graph.Value, group int, eps float32) *graph.Value {
	return apply1(b, OpL2Norm, NormAttrs{Group: group, Eps: eps}, x)
}

// OpRMSNorm is the root-mean-square norm with a learned scale.
var OpRMSNorm = &Def{
	Op: "rmsnorm",
	Doc: "rmsnorm(x[..., N], w) = x / sqrt(mean x² + Eps) ⊙ w over each run of Group elements of the last dimension (Group 0: the " +
		"whole row), the mean in f64. w (f32, bf16 or f16) is [Group] (one scale for every run: a per-head norm) or [N] (a scale per " +
		"element of the row: a grouped norm that takes the RMS per run and applies a whole-row weight). A norm whose checkpoint stores " +
		"offsets from one (1 + w) is given 1 + w, folded at load.",
	Arity: 2, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[NormAttrs]("rmsnorm", a)
		if err != nil {
			return graph.Signature{}, err
		}
		x, w := in[0], in[1]
		if err := wantF32("x", x); err != nil {
			return graph.Signature{}, err
		}
		g, err := groupOf(at, x)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := wantWeightType("w", w); err != nil {
			return graph.Signature{}, err
		}
		if len(w.Shape) != 1 || (w.Shape[0] != g && w.Shape[0] != x.Shape.Last()) {
			return graph.Signature{}, fmt.Errorf("x %s, w %s: w must be [%d] (the group) or [%d] (the row)", x, w, g, x.Shape.Last())
		}
		return one(graph.F32, x.Shape), nil
	},
}

// RMSNorm is x / sqrt(mean x² + eps) ⊙ w over runs of group elements (0:
// the whole row); w is [group] or the whole row.
func RMSNorm(b *graph.Builder, x, w *graph.Value, group int, eps float32) *graph.Value {
	return apply1(b, OpRMSNorm, NormAttrs{Group: group, Eps: eps}, x, w)
}
