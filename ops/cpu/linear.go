package cpu

import (
	"fmt"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// How a matmul runs. Every weight is read in blocks of its rows (decoded to
// f32 when it is bf16 or f16, into a per-goroutine scratch), and each block
// row's dot product is taken with each input row (gonum's SIMD dot, eight
// partial sums); the blocks of all weights of a grouped matmul are split
// across goroutines. One row at a time is fastest for few input rows (the
// decoded row stays in L1); for many rows, blocks of blockRows weight rows
// let every input row pass over a block that stays in cache. Measured on two
// cores of a Xeon (bench_test.go, 2560 x 2560), this beats gonum's Sgemm,
// which works on 64 x 64 tiles through short dot products: bf16 at 512 rows
// 31 against 18 GFLOP/s, f32 22 against 11 GFLOP/s. The Sgemm path stays
// selectable (pathGemm) so that the benchmarks can compare the two on other
// machines.
const (
	// manyRows is the input row count from which weights are read in blocks.
	manyRows = 8
	// blockRows is the weight rows per block for many input rows.
	blockRows = 16
	// gemmBlock is the decoded weight rows per Sgemm call on the Sgemm path.
	gemmBlock = 64
)

// matmulPath picks how a matmul runs.
type matmulPath uint8

const (
	pathDots matmulPath = iota // blocks of weight rows, a dot product per (input row, weight row)
	pathGemm                   // gonum's Sgemm
)

// embedKernel gathers table rows: out[t] = table[ids[t]].
func embedKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	tv := n.Inputs[0]
	table, err := matrixOf("table", in[0], tv.Shape[0], tv.Shape[1])
	if err != nil {
		return nil, err
	}
	ids := in[1].I32
	y, err := f32s("output", out[0])
	if err != nil {
		return nil, err
	}
	if len(ids) != in[1].n {
		return nil, fmt.Errorf("ids buffer is %s, want i32", in[1].dt)
	}
	h := table.cols
	return ops.StepFunc(func() error {
		for t, id := range ids {
			if id < 0 || int(id) >= table.rows {
				return fmt.Errorf("embed: row %d: token id %d outside the vocabulary of %d", t, id, table.rows)
			}
		}
		for t, id := range ids {
			dst := y[t*h : (t+1)*h]
			if src := table.block(int(id), int(id)+1, dst); !table.decodes() {
				copy(dst, src)
			}
		}
		return nil
	}), nil
}

// projection is one weight of a (grouped) matmul and its output.
type projection struct {
	w matrix
	y []float32 // rows × w.rows
}

// matmulStep computes y = x·wᵀ for one or several weights sharing x.
type matmulStep struct {
	be      *Backend
	x       []float32 // rows × k
	rows, k int
	proj    []projection
	decodes bool // some weight is not f32
	// path is pathDots except in benchmarks.
	path matmulPath
}

// bindMatMul makes the step of matmul (one weight) and grouped_matmul.
func bindMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	s, err := newMatMul(be, n, in, out)
	if err != nil {
		return nil, err
	}
	return ops.StepFunc(s.run), nil
}

func newMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*matmulStep, error) {
	if len(in) < 2 || len(out) != len(in)-1 {
		return nil, fmt.Errorf("%s: %d inputs and %d outputs", n.Op, len(in), len(out))
	}
	x, err := f32s("x", in[0])
	if err != nil {
		return nil, err
	}
	xv := n.Inputs[0]
	s := &matmulStep{be: be, x: x, k: xv.Shape.Last(), rows: xv.Shape.Rows()}
	for i, wv := range n.Inputs[1:] {
		if len(wv.Shape) != 2 || wv.Shape[1] != s.k {
			return nil, fmt.Errorf("weight %d %s does not take %d features", i, wv, s.k)
		}
		w, err := matrixOf(fmt.Sprintf("weight %d", i), in[i+1], wv.Shape[0], wv.Shape[1])
		if err != nil {
			return nil, err
		}
		y, err := f32s(fmt.Sprintf("output %d", i), out[i])
		if err != nil {
			return nil, err
		}
		if len(y) != s.rows*w.rows {
			return nil, fmt.Errorf("output %d has %d elements, want %d x %d", i, len(y), s.rows, w.rows)
		}
		s.proj = append(s.proj, projection{w: w, y: y})
		s.decodes = s.decodes || w.decodes()
	}
	return s, nil
}

func (s *matmulStep) run() error {
	if s.rows == 0 {
		return nil
	}
	if s.k == 0 {
		for _, p := range s.proj {
			clear(p.y)
		}
		return nil
	}
	if s.path == pathGemm {
		for _, p := range s.proj {
			s.gemm(p)
		}
		return nil
	}
	s.dots()
	return nil
}

// dots reads the weights in blocks of rows and takes each block row's dot
// product with each input row.
func (s *matmulStep) dots() {
	block := 1
	if s.rows >= manyRows {
		block = blockRows
	}
	// Block b of the whole list is block b-first[i] of weight i.
	first := make([]int, len(s.proj)+1)
	work := 0
	for i, p := range s.proj {
		first[i+1] = first[i] + (p.w.rows+block-1)/block
		work += s.rows * p.w.rows * s.k
	}
	parallelFor(first[len(s.proj)], s.be.threadsFor(work), func(lo, hi int) {
		var scratch []float32
		if s.decodes {
			sp := s.be.borrow(block * s.k)
			defer s.be.giveBack(sp)
			scratch = *sp
		}
		for i, p := range s.proj {
			nw := p.w.rows
			for b := max(lo, first[i]); b < min(hi, first[i+1]); b++ {
				n0 := (b - first[i]) * block
				n1 := min(n0+block, nw)
				wb := p.w.block(n0, n1, scratch)
				for r := 0; r < s.rows; r++ {
					xr, yr := s.x[r*s.k:(r+1)*s.k], p.y[r*nw+n0:r*nw+n1]
					for j := range yr {
						yr[j] = dot(wb[j*s.k:(j+1)*s.k], xr)
					}
				}
			}
		}
	})
}

// gemm computes one projection with gonum's Sgemm: at once for an f32
// weight, else by blocks of decoded weight rows, the blocks split across
// goroutines.
func (s *matmulStep) gemm(p projection) {
	nw, k := p.w.rows, s.k
	a := blas32.General{Rows: s.rows, Cols: k, Stride: k, Data: s.x}
	if !p.w.decodes() {
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, a, blas32.General{Rows: nw, Cols: k, Stride: k, Data: p.w.f32}, 0,
			blas32.General{Rows: s.rows, Cols: nw, Stride: nw, Data: p.y})
		return
	}
	blocks := (nw + gemmBlock - 1) / gemmBlock
	parallelFor(blocks, s.be.threadsFor(s.rows*nw*k), func(lo, hi int) {
		sp := s.be.borrow(gemmBlock * k)
		defer s.be.giveBack(sp)
		for bi := lo; bi < hi; bi++ {
			n0, n1 := bi*gemmBlock, min((bi+1)*gemmBlock, nw)
			wb := p.w.block(n0, n1, *sp)
			blas32.Gemm(blas.NoTrans, blas.Trans, 1, a, blas32.General{Rows: n1 - n0, Cols: k, Stride: k, Data: wb}, 0,
				blas32.General{Rows: s.rows, Cols: n1 - n0, Stride: nw, Data: p.y[n0:]})
		}
	})
}
