package cpu

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
)

var _ ops.RandomLoader = (*Backend)(nil)

// LoadRandom makes the synthetic weight r describes (ops.RandomLoader):
// Load of Random's bytes.
func (be *Backend) LoadRandom(r ops.Random) (ops.Buffer, error) {
	data, err := Random(r, be.threads)
	if err != nil {
		return nil, err
	}
	return be.Load(r.DType(), r.Len(), data)
}

// randomChunk is the elements of a float tensor one goroutine makes at a
// time.
const randomChunk = 1 << 14

// Random makes the bytes of the synthetic weight r describes (see
// ops.Random), little-endian, on up to threads goroutines (0: every
// core): the reference every RandomLoader matches. A float tensor is made
// element by element; a quantized one band by band (BlockRows rows of a
// matrix: one row of scale blocks), its values rounded to r.Float, then
// quantized by ops.QuantBandScales and ops.QuantRowCodes, as lm quantizes
// a float matrix.
func Random(r ops.Random, threads int) ([]byte, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	dt := r.DType()
	data := make([]byte, r.Len()*dt.Size())
	if !r.Quantized() {
		n := r.Len()
		parallelFor((n+randomChunk-1)/randomChunk, threads, func(lo, hi int) {
			x := make([]float32, randomChunk)
			for c := lo; c < hi; c++ {
				at, k := c*randomChunk, min(randomChunk, n-c*randomChunk)
				for j := range k {
					x[j] = ops.RandomUniform(r.Stream, at+j, r.Scale)
				}
				encodeFloat(dt, data[at*dt.Size():(at+k)*dt.Size()], x[:k])
			}
		})
		return data, nil
	}
	mats, out, in := r.Matrices()
	br, bc := r.Blocks.BlockRows, r.Blocks.BlockCols
	sr, sc := (out+br-1)/br, (in+bc-1)/bc
	stride := ops.QuantCols(r.Codes, in)
	bands := mats * sr
	var mu sync.Mutex
	var first error
	parallelFor(bands, threads, func(lo, hi int) {
		x := make([]float32, min(br, out)*in)
		scs := make([]float32, sc)
		for band := lo; band < hi; band++ {
			m, b := band/sr, band%sr
			r0, r1 := m*out+b*br, m*out+min((b+1)*br, out) // rows of the stack
			rows := x[:(r1-r0)*in]
			for i := range rows {
				rows[i] = roundTo(r.Float, ops.RandomUniform(r.Stream, r0*in+i, r.Scale))
			}
			if err := ops.QuantBandScales(r.Codes, r.Blocks, r.ScaleType, rows, r1-r0, in, scs); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("random %s codes: matrix %d, rows %d..%d: %w", r.Codes, m, r0-m*out, r1-m*out-1, err)
				}
				mu.Unlock()
				return
			}
			if r.Scales {
				encodeFloat(dt, data[band*sc*dt.Size():(band+1)*sc*dt.Size()], scs)
				continue
			}
			for row := r0; row < r1; row++ {
				ops.QuantRowCodes(r.Codes, bc, rows[(row-r0)*in:(row-r0+1)*in], scs, data[row*stride:(row+1)*stride])
			}
		}
	})
	if first != nil {
		return nil, first
	}
	return data, nil
}

// roundTo rounds v to the nearest value of the float dtype dt (ties to
// even).
func roundTo(dt graph.DType, v float32) float32 {
	switch dt {
	case graph.BF16:
		return half.BF16ToF32(half.F32ToBF16(v))
	case graph.F16:
		return half.F16ToF32(half.F32ToF16(v))
	}
	return v
}

// encodeFloat writes x as little-endian elements of the float dtype dt.
func encodeFloat(dt graph.DType, dst []byte, x []float32) {
	switch dt {
	case graph.BF16:
		half.EncodeBF16(dst, x)
	case graph.F16:
		half.EncodeF16(dst, x)
	default:
		half.EncodeF32(dst, x)
	}
}
