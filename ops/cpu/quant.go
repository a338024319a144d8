package cpu

import (
	"encoding/binary"
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
)

// quantized is a quantized weight as matrix reads it: its codes and block
// scales, dequantized a block of rows at a time into the product's scratch,
// so the products of matmul.go serve quant_matmul unchanged (and
// expert_matmul's, quant_expert_matmul). A stack of matrices (the experts
// of quant_expert_matmul) is one matrix of all their rows, each matrix
// with its own table of scales.
type quantized struct {
	dt     graph.DType // f8_e4m3, i8 or u8 (two 4-bit codes a byte)
	codes  []byte      // rows of stride bytes
	stride int
	br, bc int // the scale blocks
	sc     int // scale columns: ⌈cols/bc⌉
	// per, sr: the rows of one matrix of the stack, and its scale rows
	// (⌈per/br⌉).
	per, sr int
	scales  *Buffer // f32, bf16 or f16, decoded as rows reads them
}

// newQuantized views the codes w (value wv: [out, stride] or [E, out,
// stride]) and the scales s (value sv) of a quantized weight of cols
// input features in blocks a.
func newQuantized(wv *graph.Value, w *Buffer, sv *graph.Value, s *Buffer, a ops.QuantAttrs, cols int) (*quantized, error) {
	stride := ops.QuantCols(wv.DType, cols)
	rows := wv.Shape.Elems() / max(1, wv.Shape.Last())
	if !wv.DType.IsQuantized() || len(wv.Shape) < 2 || len(w.Raw) < rows*stride || wv.Shape.Last() != stride {
		return nil, fmt.Errorf("weight %s: %d bytes for %d rows of %d features", wv, len(w.Raw), rows, cols)
	}
	sn := sv.Shape.Elems()
	if len(s.Raw) < sn*s.dt.Size() || (s.dt == graph.F32 && len(s.F32) != sn) || !s.dt.IsFloat() || len(sv.Shape) < 2 {
		return nil, fmt.Errorf("scales %s: a %s buffer of %d bytes", sv, s.dt, len(s.Raw))
	}
	per := wv.Shape[len(wv.Shape)-2]
	return &quantized{dt: wv.DType, codes: w.Raw[:rows*stride], stride: stride, br: a.BlockRows, bc: a.BlockCols,
		sc: sv.Shape.Last(), per: per, sr: sv.Shape[len(sv.Shape)-2], scales: s}, nil
}

// scale is scale i of the tables, in f32.
func (q *quantized) scale(i int) float32 {
	switch q.scales.dt {
	case graph.F32:
		return q.scales.F32[i]
	case graph.BF16:
		return half.BF16ToF32(binary.LittleEndian.Uint16(q.scales.Raw[2*i:]))
	}
	return half.F16ToF32(binary.LittleEndian.Uint16(q.scales.Raw[2*i:]))
}

// rows dequantizes rows [lo, hi) of cols elements into dst.
func (q *quantized) rows(lo, hi, cols int, dst []float32) {
	for n := lo; n < hi; n++ {
		srow := (n/q.per*q.sr + n%q.per/q.br) * q.sc
		code := q.codes[n*q.stride : (n+1)*q.stride]
		out := dst[(n-lo)*cols : (n-lo+1)*cols]
		for j := range q.sc {
			s := q.scale(srow + j)
			k0, k1 := j*q.bc, min((j+1)*q.bc, cols)
			switch q.dt {
			case graph.F8E4M3:
				for k, c := range code[k0:k1] {
					out[k0+k] = half.E4M3ToF32(c) * s
				}
			case graph.I8:
				for k, c := range code[k0:k1] {
					out[k0+k] = float32(int8(c)) * s
				}
			default:
				for k := k0; k < k1; k++ {
					u := code[k>>1] >> (4 * (k & 1)) & 15
					out[k] = float32(int(u)-8) * s
				}
			}
		}
	}
}

// bindQuantMatMul binds quant_matmul: a matmul (one projection) whose
// weight rows are dequantized block by block as the dot products read them.
func bindQuantMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	a, err := ops.NodeAttrs[ops.QuantAttrs](n)
	if err != nil {
		return nil, err
	}
	x, err := f32s("x", in[0])
	if err != nil {
		return nil, err
	}
	y, err := f32s("output", out[0])
	if err != nil {
		return nil, err
	}
	xv, wv := n.Inputs[0], n.Inputs[1]
	k, rows, nw := xv.Shape.Last(), xv.Shape.Rows(), wv.Shape[0]
	q, err := newQuantized(wv, in[1], n.Inputs[2], in[2], a, k)
	if err != nil {
		return nil, err
	}
	if len(y) != rows*nw {
		return nil, fmt.Errorf("output has %d elements, want %d x %d", len(y), rows, nw)
	}
	st := &matmulStep{be: be, x: x, k: k, rows: rows, decodes: true,
		proj: []projection{{w: matrix{dt: wv.DType, rows: nw, cols: k, q: q}, y: y}}}
	return ops.StepFunc(st.run), nil
}

// bindQuantExpertMatMul binds quant_expert_matmul: expert_matmul's
// product, the rows of the routed experts dequantized as they are read.
func bindQuantExpertMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	a, err := ops.NodeAttrs[ops.QuantAttrs](n)
	if err != nil {
		return nil, err
	}
	ws, k := n.Inputs[1].Shape, n.Inputs[0].Shape.Last()
	q, err := newQuantized(n.Inputs[1], in[1], n.Inputs[2], in[2], a, k)
	if err != nil {
		return nil, err
	}
	w := matrix{dt: n.Inputs[1].DType, rows: ws[0] * ws[1], cols: k, q: q}
	return expertProduct(be, n, in[0], w, in[3], out[0], ws[0])
}

// quantKernels are the kernels of the products with quantized weights.
var quantKernels = map[string]kernelFunc{
	"quant_matmul":        bindQuantMatMul,
	"quant_expert_matmul": bindQuantExpertMatMul,
}
