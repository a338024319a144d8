package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Synthetic weights made on the card (kernels/random.cu): a released
// model's hundred gigabytes of random weights never pass through the host.

// The backend makes synthetic weights, and says its free memory.
var (
	_ ops.RandomLoader   = (*Backend)(nil)
	_ ops.MemoryReporter = (*Backend)(nil)
)

// randomKernels are their kernels.
var randomKernels = []string{"rand_values", "rand_quant_rows", "rand_quant_blocks"}

// randomThreads is rand_quant_blocks' block (RQ_THREADS).
const randomThreads = 256

// LoadRandom makes the synthetic weight r describes in a new buffer
// (ops.RandomLoader): the bytes the CPU backend's Random makes, stored as
// Load stores them (an f32 weight of at least MinConvertElems elements as
// bf16 under Options.F32WeightsAsBF16). It waits for the kernels, so that
// an error is this weight's. 4-bit codes need groups of an even number of
// columns and of one row (as lm's q4 has them).
func (be *Backend) LoadRandom(r ops.Random) (ops.Buffer, error) {
	if err := be.check(); err != nil {
		return nil, err
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if r.Codes == graph.U8 && (r.Blocks.BlockRows != 1 || r.Blocks.BlockCols%2 != 0) {
		return nil, fmt.Errorf("cuda: random 4-bit codes in blocks of %dx%d: want one row and an even number of columns", r.Blocks.BlockRows, r.Blocks.BlockCols)
	}
	dt, n := r.DType(), r.Len()
	store := be.weightStore(dt, n)
	nb, err := byteLen(store, n)
	if err != nil {
		return nil, err
	}
	p, err := be.alloc(nb)
	if err != nil {
		return nil, fmt.Errorf("cuda: random weight of %d bytes: %w", nb, err)
	}
	if err := be.launchRandom(r, p, store); err != nil {
		be.ctx.Free(p)
		return nil, err
	}
	if err := be.ctx.Sync(); err != nil {
		be.ctx.Free(p)
		return nil, fmt.Errorf("cuda: random weight: %w", err)
	}
	return be.addWeight(p, dt, store, n, nb), nil
}

// floatCode is a float dtype's WT_* code.
func floatCode(dt graph.DType) int32 {
	switch dt {
	case graph.BF16:
		return 1
	case graph.F16:
		return 2
	}
	return 0
}

// launchRandom enqueues the kernel that makes r into p, stored as store.
func (be *Backend) launchRandom(r ops.Random, p cu.DevicePtr, store graph.DType) error {
	fn := be.kernels.fn
	wt, stream, scale := floatCode(r.Float), r.Stream, r.Scale
	if !r.Quantized() {
		grid, block := grid1(int64(r.Len()))
		return be.launchDirect("rand_values", fn["rand_values"], grid, block, p, floatCode(store), int64(r.Len()), stream, scale)
	}
	qt, _, _, err := quantCode(r.Codes)
	if err != nil {
		return err
	}
	codes, scales := p, cu.DevicePtr(0)
	if r.Scales {
		codes, scales = 0, p
	}
	st, sst := floatCode(r.ScaleType), floatCode(store)
	mats, out, in := r.Matrices()
	br, bc := r.Blocks.BlockRows, r.Blocks.BlockCols
	if br == 1 {
		rows := int64(mats) * int64(out)
		grid, block := grid1(rows * int64((in+bc-1)/bc))
		return be.launchDirect("rand_quant_rows", fn["rand_quant_rows"], grid, block,
			codes, scales, qt, st, sst, wt, rows, int32(in), int32(bc), stream, scale)
	}
	blocks := int64(mats) * int64((out+br-1)/br) * int64((in+bc-1)/bc)
	grid := [3]uint32{uint32(min(blocks, 65535)), 1, 1}
	return be.launchDirect("rand_quant_blocks", fn["rand_quant_blocks"], grid, [3]uint32{randomThreads, 1, 1},
		codes, scales, qt, st, sst, wt, int32(mats), int32(out), int32(in), int32(br), int32(bc), stream, scale)
}

// launchDirect launches a kernel now, outside any plan.
func (be *Backend) launchDirect(name string, fn *cu.Function, grid, block [3]uint32, args ...any) error {
	l := &launch{name: name, fn: fn, grid: grid, block: block, args: args}
	if fn == nil {
		l.why = be.kernels.why(name)
	}
	return l.run(be.ctx)
}
