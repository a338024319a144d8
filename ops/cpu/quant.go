package cpu

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
)

// quantized is a quantized weight as matrix reads it: its codes and block
// scales, dequantized a block of rows at a time into the matmul's scratch,
// so the products of matmul.go serve quant_matmul unchanged.
type quantized struct {
	dt     graph.DType // f8_e4m3, i8 or u8 (two 4-bit codes a byte)
	codes  []byte      // rows of stride bytes
	stride int
	br, bc int       // the scale blocks
	sc     int       // scale columns: ⌈cols/bc⌉
	scale  []float32 // [⌈rows/br⌉, sc], current at run time (see load)
	sbuf   *Buffer   // the scales as bound
}

// load makes scale current: the f32 buffer itself, or its bf16 or f16
// elements decoded (a few per thousand weights) into scale.
func (q *quantized) load() {
	switch q.sbuf.dt {
	case graph.F32:
		q.scale = q.sbuf.F32
	case graph.BF16:
		half.DecodeBF16(q.scale, q.sbuf.Raw)
	default:
		half.DecodeF16(q.scale, q.sbuf.Raw)
	}
}

// rows dequantizes rows [lo, hi) of cols elements into dst.
func (q *quantized) rows(lo, hi, cols int, dst []float32) {
	for n := lo; n < hi; n++ {
		srow := q.scale[n/q.br*q.sc : (n/q.br+1)*q.sc]
		code := q.codes[n*q.stride : (n+1)*q.stride]
		out := dst[(n-lo)*cols : (n-lo+1)*cols]
		for j, s := range srow {
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
	xv, wv, sv := n.Inputs[0], n.Inputs[1], n.Inputs[2]
	k, rows, nw := xv.Shape.Last(), xv.Shape.Rows(), wv.Shape[0]
	stride := ops.QuantCols(wv.DType, k)
	w, s := in[1], in[2]
	if !wv.DType.IsQuantized() || len(w.Raw) < nw*stride || wv.Shape[1] != stride {
		return nil, fmt.Errorf("weight %s: %d bytes for %d rows of %d features", wv, len(w.Raw), nw, k)
	}
	sn := sv.Shape.Elems()
	if len(s.Raw) < sn*s.dt.Size() || (s.dt == graph.F32 && len(s.F32) != sn) || !s.dt.IsFloat() {
		return nil, fmt.Errorf("scales %s: a %s buffer of %d bytes", sv, s.dt, len(s.Raw))
	}
	if len(y) != rows*nw {
		return nil, fmt.Errorf("output has %d elements, want %d x %d", len(y), rows, nw)
	}
	q := &quantized{dt: wv.DType, codes: w.Raw[:nw*stride], stride: stride, br: a.BlockRows, bc: a.BlockCols,
		sc: sv.Shape[1], sbuf: s}
	if s.dt != graph.F32 {
		q.scale = make([]float32, sn)
	}
	st := &matmulStep{be: be, x: x, k: k, rows: rows, decodes: true,
		proj: []projection{{w: matrix{dt: wv.DType, rows: nw, cols: k, q: q}, y: y}}}
	return ops.StepFunc(func() error {
		q.load()
		return st.run()
	}), nil
}

// quantKernels are the kernels of the products with quantized weights.
var quantKernels = map[string]kernelFunc{
	"quant_matmul": bindQuantMatMul,
}
