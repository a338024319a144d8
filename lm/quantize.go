package lm

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
)

// Quantize quantizes a matrix [out, in] stored in a float type (f32, bf16,
// f16) in q's format: its codes and its block scales, as Quant describes
// them; a stack of matrices [E, out, in] (experts) is quantized matrix by
// matrix, codes [E, out, in] (q4: [E, out, ⌈in/2⌉]) and one table of
// scales per matrix [E, ⌈out/R⌉, ⌈in/C⌉]. A block's scale maps its largest
// magnitude to the largest code (fp8: 448, q8: 127, q4: the value of
// largest magnitude to -8), rounded to the scales' dtype first, so that
// every code is computed with the scale stored; codes round to nearest. A
// non-finite weight, or a block whose scale does not fit in the scales'
// dtype, is an error naming the block. Row blocks are quantized on every
// core.
func (q Quant) Quantize(t Tensor) (codes, scales Tensor, err error) {
	if len(t.Shape) < 2 || len(t.Shape) > 3 || !t.DType.IsFloat() || t.Len() <= 0 || len(t.Data) != t.Len()*t.DType.Size() {
		return Tensor{}, Tensor{}, fmt.Errorf("quantize %s%v (%d bytes): want a float matrix, or a stack of them", t.DType, t.Shape, len(t.Data))
	}
	if q.DType() == graph.Invalid || q.BlockRows < 1 || q.BlockCols < 1 {
		return Tensor{}, Tensor{}, fmt.Errorf("quantize in %s: not a format", q)
	}
	lead := t.Shape[:len(t.Shape)-2]
	out, in := t.Shape[len(t.Shape)-2], t.Shape[len(t.Shape)-1]
	cdt, sdt := q.DType(), q.ScaleDType()
	stride := ops.QuantCols(cdt, in)
	ss := q.scaleShape(out, in, lead...)
	mats := t.Len() / (out * in)
	sr, sc := ss[len(ss)-2], ss[len(ss)-1]
	codes = Tensor{DType: cdt, Shape: append(slices.Clone(lead), out, stride), Data: make([]byte, mats*out*stride)}
	scales = Tensor{DType: sdt, Shape: ss, Data: make([]byte, mats*sr*sc*sdt.Size())}
	bands := mats * sr // bands of BlockRows rows of a matrix, one row of scales each
	workers := min(runtime.GOMAXPROCS(0), bands, max(1, t.Len()/(1<<16)))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := make([]float32, min(q.BlockRows, out)*in)
			scs := make([]float32, sc)
			for band := w * bands / workers; band < (w+1)*bands/workers; band++ {
				m, b := band/sr, band%sr
				r0, r1 := m*out+b*q.BlockRows, m*out+min((b+1)*q.BlockRows, out)
				x := rows[:(r1-r0)*in]
				t.DType.DecodeFloats(x, t.Data[r0*in*t.DType.Size():r1*in*t.DType.Size()])
				if err := ops.QuantBandScales(cdt, q.Attrs(), sdt, x, r1-r0, in, scs); err != nil {
					errs[w] = fmt.Errorf("quantize %srows %d..%d: %w", whichMatrix(lead, m), r0-m*out, r1-m*out-1, err)
					return
				}
				for j, s := range scs {
					o := (band*sc + j) * sdt.Size()
					if sdt == graph.F32 {
						binary.LittleEndian.PutUint32(scales.Data[o:], math.Float32bits(s))
					} else {
						binary.LittleEndian.PutUint16(scales.Data[o:], half.F32ToF16(s))
					}
				}
				for r := r0; r < r1; r++ {
					ops.QuantRowCodes(cdt, q.BlockCols, x[(r-r0)*in:(r-r0+1)*in], scs, codes.Data[r*stride:(r+1)*stride])
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Tensor{}, Tensor{}, err
		}
	}
	return codes, scales, nil
}

// whichMatrix names matrix m of a stack for an error ("matrix 3: "; "" when
// the tensor is one matrix).
func whichMatrix(lead []int, m int) string {
	if len(lead) == 0 {
		return ""
	}
	return fmt.Sprintf("matrix %d: ", m)
}

// Dequantize is the float32 matrix [out, in] of codes and scales in q's
// format (Quantize's inverse, up to the rounding of the codes); codes and
// scales of a stack of matrices [E, out, in] give the E matrices one after
// the other.
func (q Quant) Dequantize(codes, scales Tensor, out, in int) ([]float32, error) {
	stride, ss := ops.QuantCols(q.DType(), in), q.scaleShape(out, in)
	mats := 0
	if out > 0 && stride > 0 {
		mats = len(codes.Data) / (out * stride)
	}
	if codes.DType != q.DType() || mats < 1 || len(codes.Data) != mats*out*stride || !scales.DType.IsFloat() ||
		len(scales.Data) != mats*ss[0]*ss[1]*scales.DType.Size() {
		return nil, fmt.Errorf("dequantize %s%v with scales %s%v as %s [%d %d]", codes.DType, codes.Shape, scales.DType, scales.Shape, q, out, in)
	}
	sc := make([]float32, mats*ss[0]*ss[1])
	scales.DType.DecodeFloats(sc, scales.Data)
	w := make([]float32, mats*out*in)
	for r := range mats * out {
		row := codes.Data[r*stride : (r+1)*stride]
		srow := (r/out*ss[0] + r%out/q.BlockRows) * ss[1]
		for k := range in {
			var c float32
			switch q.Method {
			case QuantFP8:
				c = half.E4M3ToF32(row[k])
			case QuantQ8:
				c = float32(int8(row[k]))
			default:
				c = float32(int(row[k>>1]>>(4*(k&1))&15) - 8)
			}
			w[r*in+k] = c * sc[srow+k/q.BlockCols]
		}
	}
	return w, nil
}
