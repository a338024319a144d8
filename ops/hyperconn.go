package ops

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
)

// Gated residual (hyper-connection) streams: the hidden state is kept
// as C copies side by side, X[T, C·H] (stream c = columns [cH, (c+1)H)). A
// gated residual before a block computes, from Xn = rmsnorm(X; hc_norm,
// group H) (hc_norm a weight of the whole row C·H):
//
//	t = silu((Xn · W_downᵀ) / C)           matmul, scale, silu
//	u = hc_mix(Xn, t · W_upᵀ)              the block's input [T, H]
//	l = Xn · W_injectᵀ                     inject logits [T, C]
//
// and after the block X = hc_inject(X, y, l).

// StreamAttrs are the attributes of the ops over the C residual streams.
type StreamAttrs struct {
	// Streams is hc_count C: the hyper-state holds C copies of the hidden
	// state side by side.
	Streams int
}

func streamsOf(op string, a any) (int, error) {
	at, err := attrsAs[StreamAttrs](op, a)
	if err != nil {
		return 0, err
	}
	if at.Streams <= 0 {
		return 0, fmt.Errorf("%s: streams %d must be positive", op, at.Streams)
	}
	return at.Streams, nil
}

// OpHCExpand tiles the hidden state into the residual streams.
var OpHCExpand = &Def{
	Op:    "hc_expand",
	Doc:   "hc_expand(x[T, H]) = [x | x | ... | x] ([T, C·H], C = Streams copies): the embedding tiled into the residual streams.",
	Arity: 1,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		c, err := streamsOf("hc_expand", a)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := checkRows("x", in[0], -1); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, graph.Shape{in[0].Shape[0], c * in[0].Shape[1]}), nil
	},
}

// HCExpand tiles x[T, H] into streams copies, [T, streams·H].
func HCExpand(b *graph.Builder, x *graph.Value, streams int) *graph.Value {
	return apply1(b, OpHCExpand, StreamAttrs{Streams: streams}, x)
}

// hcStreams checks a hyper-state [T, C·H] and gives H.
func hcStreams(what string, x *graph.Value, c int) (int, error) {
	if err := checkRows(what, x, -1); err != nil {
		return 0, err
	}
	if x.Shape[1]%c != 0 || x.Shape[1] == 0 {
		return 0, fmt.Errorf("%s %s: width is not a positive multiple of %d streams", what, x, c)
	}
	return x.Shape[1] / c, nil
}

// OpHCMix is the gated residual's fold of the streams into a block input.
var OpHCMix = &Def{
	Op: "hc_mix",
	Doc: "hc_mix(xn[T, C·H], g[T, C·H]) = u[T, H], u = (1/C) Σ_c sigmoid(g_c) ⊙ xn_c, x_c the columns [cH, (c+1)H): " +
		"the block input of a gated residual from the normed hyper-state xn and the logits g = W_up·silu(W_down·xn / C).",
	Arity: 2,
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		c, err := streamsOf("hc_mix", a)
		if err != nil {
			return graph.Signature{}, err
		}
		h, err := hcStreams("xn", in[0], c)
		if err != nil {
			return graph.Signature{}, err
		}
		if !in[1].Shape.Equal(in[0].Shape) || in[1].DType != graph.F32 {
			return graph.Signature{}, fmt.Errorf("g %s must be f32 of the shape of xn %s", in[1], in[0])
		}
		return one(graph.F32, graph.Shape{in[0].Shape[0], h}), nil
	},
}

// HCMix is (1/C) Σ_c sigmoid(g_c) ⊙ xn_c.
func HCMix(b *graph.Builder, xn, g *graph.Value, streams int) *graph.Value {
	return apply1(b, OpHCMix, StreamAttrs{Streams: streams}, xn, g)
}

// OpHCInject adds a block's output back into every stream.
var OpHCInject = &Def{
	Op: "hc_inject",
	Doc: "hc_inject(x[T, C·H], y[T, H], l[T, C]) = x' with x'_c = x_c + 2·sigmoid(l_c / C) · y: the block output y added to each stream " +
		"with its inject weight, from the inject logits l = W_inject·xn of the same gated residual.",
	Arity: 3, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		c, err := streamsOf("hc_inject", a)
		if err != nil {
			return graph.Signature{}, err
		}
		h, err := hcStreams("x", in[0], c)
		if err != nil {
			return graph.Signature{}, err
		}
		if err := checkRows("y", in[1], h); err != nil {
			return graph.Signature{}, fmt.Errorf("%w (x is %s)", err, in[0])
		}
		if err := checkRows("l", in[2], c); err != nil {
			return graph.Signature{}, err
		}
		if err := sameRows(in...); err != nil {
			return graph.Signature{}, err
		}
		return one(graph.F32, in[0].Shape), nil
	},
}

// HCInject is x_c + 2·sigmoid(l_c / C) · y for every stream c.
func HCInject(b *graph.Builder, x, y, l *graph.Value, streams int) *graph.Value {
	return apply1(b, OpHCInject, StreamAttrs{Streams: streams}, x, y, l)
}

// ReshapeAttrs give the new shape of reshape.
type ReshapeAttrs struct {
	Shape graph.Shape
}

// OpReshape gives a value another shape of the same size.
var OpReshape = &Def{
	Op:    "reshape",
	Doc:   "reshape(x) = x viewed with Shape (row-major, same dtype and element count): MTP's per-stream projection reads [T, C·H] as [T·C, H].",
	Arity: 1, InPlace: []int{0},
	Rule: func(a any, in []*graph.Value) (graph.Signature, error) {
		at, err := attrsAs[ReshapeAttrs]("reshape", a)
		if err != nil {
			return graph.Signature{}, err
		}
		for _, d := range at.Shape {
			if d < 0 {
				return graph.Signature{}, fmt.Errorf("reshape %s to %v: negative extent", in[0], at.Shape)
			}
		}
		if n := in[0].Shape.Elems(); n < 0 || n != at.Shape.Elems() {
			return graph.Signature{}, fmt.Errorf("reshape %s to %v: element counts differ", in[0], at.Shape)
		}
		return one(in[0].DType, at.Shape), nil
	},
}

// Reshape views x with another shape of the same element count.
func Reshape(b *graph.Builder, x *graph.Value, shape ...int) *graph.Value {
	return apply1(b, OpReshape, ReshapeAttrs{Shape: append(graph.Shape(nil), shape...)}, x)
}
