package cuda

import (
	"fmt"
	"strconv"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of the mixture-of-experts ops (ops/moe.go); the kernels are
// in kernels/moe.cu. moe_route is one block per row; expert_matmul is
// one warp per (unit, output feature) for a decode token (each unit streams
// its expert's rows); for a decode window (2 to matvecMaxRows rows) one
// launch whose blocks each take one chosen expert and stream its rows once
// for all the window's units routed to it (moe_expert_window); else a
// grouping of the units by expert followed by a tiled product per (expert,
// block of features), which reads each expert's rows once for all of its
// units: in f32 for f32 weights, on the tensor cores (bf16 or f16 weights)
// for more rows (a prompt chunk); silu_glu and moe_combine are grid-stride
// elementwise kernels.

// moeBinders are the binders of the MoE ops, by op name.
var moeBinders = map[string]binder{
	"moe_route":     bindMoERoute,
	"expert_matmul": bindExpertMatMul,
	"silu_glu":      bindSiLUGLU,
	// the fused gate_up product and activation (ops/fused_moe.go)
	"expert_matmul_glu": bindExpertMatMulGLU,
	"moe_combine":       bindMoECombine,
}

// moeKernels are the kernels of kernels/moe.cu that the binders launch.
var moeKernels = []string{"moe_route", "moe_expert_warp", "moe_expert_group", "moe_expert_tile", "moe_expert_rank",
	"moe_expert_mma_bf16", "moe_expert_mma_f16", "moe_silu_glu", "moe_combine", "moe_expert_warp_glu",
	"moe_expert_window", "moe_expert_window_glu"}

// The error codes of kernels/moe.cu (ERR_MOE_*).
const (
	moeErrNaN = 40 // a = row, b = expert
	moeErrID  = 41 // a = row, b = pick, c = id, w[4] = experts
)

const (
	// moeSharedMax is the dynamic shared memory a launch takes without
	// opting in to more.
	moeSharedMax = 48 << 10
	// moeWarps is MOE_WARPS: the warps of a moe_expert_warp block.
	moeWarps = 8
	// moeTile is MOE_TN: the features of a moe_expert_tile block.
	moeTile = 64
	// moeTileThreads is the block of moe_expert_tile (its 16x16 threads).
	moeTileThreads = 256
	// moeGroupThreads is the block of moe_expert_group.
	moeGroupThreads = 1024
	// moeRankWarps is the warps of a moe_expert_rank block (one a unit).
	moeRankWarps = 8
	// moeMMAUnits and moeMMAFeats are MOE_MMA_BM and MOE_MMA_BN: the units
	// and features of a moe_expert_mma tile; moeMMAThreads its block.
	moeMMAUnits   = 64
	moeMMAFeats   = 128
	moeMMAThreads = 256
	// moeWinMaxUnits and moeWinMaxExperts are MOE_WIN_MAXU and
	// MOE_WIN_MAXE: the most units and experts of moe_expert_window.
	moeWinMaxUnits   = 256
	moeWinMaxExperts = 4096
	// moeWindowMinRows is the fewest rows that take moe_expert_window by
	// default (REEL_MOE_WINDOW): a 1-row token's units have an expert
	// each, and the warp forms need no search for it.
	moeWindowMinRows = 2
	// moeWinBlocksPerSM is the blocks per SM that moeWindowFPW keeps
	// while it gives each warp more features.
	moeWinBlocksPerSM = 4
)

// moeKernelErr words the error record of the MoE kernels' codes; nil for
// other codes.
func moeKernelErr(w [errRecWords]int32) error {
	switch w[0] {
	case moeErrNaN:
		return fmt.Errorf("moe_route: row %d: router logit of expert %d is NaN", w[1], w[2])
	case moeErrID:
		return fmt.Errorf("expert product: row %d pick %d: expert id %d outside [0, %d)", w[1], w[2], w[3], w[4])
	}
	return nil
}

// bindMoERoute binds moe_route: one block per row of logits; the row's
// logits and its kept probabilities live in dynamic shared memory.
func bindMoERoute(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.RouteAttrs](n)
	if err != nil {
		return nil, err
	}
	l, ids, w := in[0], out[0], out[1]
	if err := f32All([]string{"logits", "weights"}, []*Buffer{l, w}); err != nil {
		return nil, err
	}
	if ids.dt != graph.I32 {
		return nil, fmt.Errorf("moe_route: ids are %s, want i32", ids.dt)
	}
	e, k := n.Inputs[0].Shape.Last(), at.K
	if e <= 0 || k <= 0 || k > e {
		return nil, fmt.Errorf("moe_route: top-%d of %d experts", k, e)
	}
	if l.n%e != 0 {
		return nil, fmt.Errorf("moe_route: logits of %d elements in rows of %d", l.n, e)
	}
	rows := l.n / e
	if ids.n != rows*k || w.n != rows*k {
		return nil, fmt.Errorf("moe_route: ids of %d and weights of %d elements, want %d (%d rows, top-%d)", ids.n, w.n, rows*k, rows, k)
	}
	shared := 8*k + 4*e
	if shared > moeSharedMax {
		return nil, fmt.Errorf("moe_route: top-%d of %d experts takes %d bytes of shared memory, over %d", k, e, shared, moeSharedMax)
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	norm := int32(0)
	if at.Norm {
		norm = 1
	}
	s.add("moe_route", [3]uint32{uint32(rows), 1, 1}, [3]uint32{threadsFor(e, 1024), 1, 1}, uint32(shared),
		l.ptr, ids.ptr, w.ptr, int32(e), int32(k), norm, be.errRec)
	return s, nil
}

// bindExpertMatMul binds expert_matmul. Over matvecMaxRows rows with bf16
// or f16 weights it takes the tensor cores (expertMMA). A decode window
// takes moe_expert_window (expertWindow). Otherwise, with at most as many
// units (rows·k) as experts it launches moe_expert_warp, a warp per (unit,
// feature), with 16-byte weight loads when the rows allow them; with more,
// the units are grouped by expert into scratch (moe_expert_group) and
// moe_expert_tile reads each expert's rows once for all of its units.
func bindExpertMatMul(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	x, w, ids, y := in[0], in[1], in[2], out[0]
	wt, err := wtype(w)
	if err != nil {
		return nil, fmt.Errorf("expert_matmul: w: %w", err)
	}
	d, err := expertDims("expert_matmul", n, x, w, ids, y, n.Inputs[1].Shape.Last())
	if err != nil {
		return nil, err
	}
	s := be.newSteps()
	if d.units == 0 {
		return s, nil
	}
	if d.mma(wt) {
		vw := int32(0)
		if d.nIn%8 == 0 && w.ptr%16 == 0 {
			vw = 1
		}
		return be.expertMMA(s, d, x, "moe_expert_mma_"+wtypeNames[wt], []any{w.ptr}, vw, ids, y)
	}
	if d.window(be.moeWindowRows) {
		return be.expertWindow(s, d, "moe_expert_window", x, w, wt, ids, y, d.nOut)
	}
	if d.grouped() {
		return be.expertGrouped(s, d, ids, func(offs, list cu.DevicePtr) {
			s.add("moe_expert_tile", d.tileGrid(), [3]uint32{moeTileThreads, 1, 1}, 0,
				x.ptr, w.ptr, wt, offs, list, y.ptr, int32(d.k), int32(d.nOut), int32(d.nIn), d.perUnit)
		})
	}
	grid, err := d.warpGrid()
	if err != nil {
		return nil, err
	}
	es := w.store.Size()
	vec := int32(0)
	if (d.nIn*es)%16 == 0 && w.ptr%16 == 0 && x.ptr%16 == 0 {
		vec = 1
	}
	s.add("moe_expert_warp", grid, [3]uint32{32 * moeWarps, 1, 1}, 0,
		x.ptr, w.ptr, wt, ids.ptr, y.ptr, int32(d.units), int32(d.k), int32(d.e), int32(d.nOut), int32(d.nIn), d.perUnit, vec, be.errRec)
	return s, nil
}

// bindExpertMatMulGLU binds expert_matmul_glu. Where expert_matmul would
// take its window form, moe_expert_window_glu computes each unit's gate and
// up rows and the activation in one launch, and where it would take its
// warp form (decode), moe_expert_warp_glu does; otherwise
// expert_matmul's form writes the products into scratch shared with
// matmul_swiglu's (be.glu) and moe_silu_glu follows.
func bindExpertMatMulGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if len(in) != 3 || len(out) != 1 {
		return nil, fmt.Errorf("expert_matmul_glu: %d inputs and %d outputs", len(in), len(out))
	}
	x, w, ids, y := in[0], in[1], in[2], out[0]
	wt, err := wtype(w)
	if err != nil {
		return nil, fmt.Errorf("expert_matmul_glu: w: %w", err)
	}
	ws := n.Inputs[1].Shape
	if len(ws) != 3 || ws[1]%2 != 0 {
		return nil, fmt.Errorf("expert_matmul_glu: w %v must be [experts, 2F, in]", ws)
	}
	// the products, as expert_matmul's output (in scratch where they are kept)
	gu := &Buffer{dt: graph.F32, store: graph.F32, n: ids.n * ws[1], bytes: 4 * ids.n * ws[1], be: be}
	d, err := expertDims("expert_matmul_glu", n, x, w, ids, gu, ws[2])
	if err != nil {
		return nil, err
	}
	f := d.nOut / 2
	if y.dt != graph.F32 || y.n != d.units*f {
		return nil, fmt.Errorf("expert_matmul_glu: output of %d %s elements, want %d f32", y.n, y.dt, d.units*f)
	}
	s := be.newSteps()
	if d.units == 0 {
		return s, nil
	}
	if d.window(be.moeWindowRows) {
		return be.expertWindow(s, d, "moe_expert_window_glu", x, w, wt, ids, y, f)
	}
	if !d.mma(wt) && !d.grouped() {
		dg := d
		dg.nOut = f
		grid, err := dg.warpGrid()
		if err != nil {
			return nil, err
		}
		vec := int32(0)
		if (d.nIn*w.store.Size())%16 == 0 && w.ptr%16 == 0 && x.ptr%16 == 0 {
			vec = 1
		}
		s.add("moe_expert_warp_glu", grid, [3]uint32{32 * moeWarps, 1, 1}, 0,
			x.ptr, w.ptr, wt, ids.ptr, y.ptr, int32(d.units), int32(d.k), int32(d.e), int32(f), int32(d.nIn), d.perUnit, vec, be.errRec)
		return s, nil
	}
	if gu.ptr, err = be.reuse(&be.glu, gu.bytes); err != nil {
		return nil, err
	}
	mm, err := bindExpertMatMul(be, n, in, []*Buffer{gu})
	if err != nil {
		return nil, err
	}
	s.then(mm)
	g, b := grid1(int64(y.n))
	s.add("moe_silu_glu", g, b, 0, gu.ptr, y.ptr, int64(y.n), int32(f))
	return s, nil
}

// expertShape is the dimensions of an expert product: units (rows·k) of
// k picks over e experts of nOut x nIn, x a row per unit (perUnit 1) or
// per row.
type expertShape struct {
	op                     string
	units, k, e, nOut, nIn int
	perUnit                int32
}

// expertDims checks the buffers of an expert product op (x, the experts w
// [E, out, cols] as stored, ids, the output y) for nIn input features and
// gives its dimensions.
func expertDims(op string, n *graph.Node, x, w, ids, y *Buffer, nIn int) (expertShape, error) {
	if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
		return expertShape{}, fmt.Errorf("%s: %w", op, err)
	}
	if ids.dt != graph.I32 {
		return expertShape{}, fmt.Errorf("%s: ids are %s, want i32", op, ids.dt)
	}
	ws, is := n.Inputs[1].Shape, n.Inputs[len(n.Inputs)-1].Shape
	if len(ws) != 3 || len(is) != 2 {
		return expertShape{}, fmt.Errorf("%s: w %v must be [experts, out, in] and ids %v [rows, k]", op, ws, is)
	}
	d := expertShape{op: op, e: ws[0], nOut: ws[1], nIn: nIn, k: is[1], units: ids.n}
	if d.e <= 0 || d.nOut <= 0 || nIn <= 0 || d.k <= 0 {
		return d, fmt.Errorf("%s: w %v, ids %v: empty", op, ws, is)
	}
	xRows := d.units / d.k
	if len(n.Inputs[0].Shape) == 3 {
		d.perUnit, xRows = 1, d.units
	}
	if d.units%d.k != 0 || x.n != xRows*nIn || w.n != ws.Elems() || y.n != d.units*d.nOut {
		return d, fmt.Errorf("%s: x of %d, w of %d, ids of %d, output of %d elements do not fit w %v and k %d (per unit %v)",
			op, x.n, w.n, ids.n, y.n, ws, d.k, d.perUnit == 1)
	}
	return d, nil
}

// grouped says whether the product takes the grouped form: more units than
// experts (each expert's rows read once for its units), and the experts'
// counts fit in shared memory.
func (d expertShape) grouped() bool { return d.units > d.e && 4*d.e <= moeSharedMax }

// mma says whether expert_matmul over weights of type wt (wtype's code)
// takes the tensor cores (expertMMA): bf16 or f16 weights, more than
// matvecMaxRows rows (a prompt chunk), and the experts' counts fit in
// shared memory.
func (d expertShape) mma(wt int32) bool {
	return wt != 0 && d.units/d.k > matvecMaxRows && 4*d.e <= moeSharedMax
}

// window says whether the product takes the window form
// (moe_expert_window): a decode window of minRows (0: never) to
// matvecMaxRows rows, within the kernel's bounds of units and experts.
func (d expertShape) window(minRows int) bool {
	rows := d.units / d.k
	return minRows > 0 && rows >= minRows && rows <= matvecMaxRows && d.units <= moeWinMaxUnits && d.e <= moeWinMaxExperts
}

// moeWindowFPW is the features each warp of moe_expert_window takes, one
// after the other, for f features an expert over slots slots (blocks of
// experts) on sms SMs: force when positive (REEL_MOE_WINDOW_FPW), else
// the most of 4, 2 and 1 that leaves at least moeWinBlocksPerSM blocks an
// SM, so that a block's search for its expert is spread over more of its
// expert's rows without leaving SMs idle.
func moeWindowFPW(f, slots, sms, force int) int {
	if force > 0 {
		return force
	}
	for _, fpw := range []int{4, 2} {
		if (f+moeWarps*fpw-1)/(moeWarps*fpw)*slots >= moeWinBlocksPerSM*sms {
			return fpw
		}
	}
	return 1
}

// parseMoEWindow reads REEL_MOE_WINDOW (the fewest rows of the window
// form: a number from 1 to matvecMaxRows, or 0 or off for never; ""
// keeps moeWindowMinRows) and REEL_MOE_WINDOW_FPW (the features a warp of
// it takes: a positive number; "" chooses, moeWindowFPW).
func parseMoEWindow(rows, fpw string) (minRows, force int, err error) {
	minRows = moeWindowMinRows
	switch rows {
	case "":
	case "off":
		minRows = 0
	default:
		if minRows, err = strconv.Atoi(rows); err != nil || minRows < 0 || minRows > matvecMaxRows {
			return 0, 0, fmt.Errorf("REEL_MOE_WINDOW=%q: want the fewest rows of the window form, 1 to %d, or 0 or off", rows, matvecMaxRows)
		}
	}
	if fpw != "" {
		if force, err = strconv.Atoi(fpw); err != nil || force < 1 || force > 64 {
			return 0, 0, fmt.Errorf("REEL_MOE_WINDOW_FPW=%q: want the features a warp takes, 1 to 64", fpw)
		}
	}
	return minRows, force, nil
}

// expertWindow appends the window form of an expert product to s:
// kernel name (moe_expert_window or its glu form) over f features an
// expert, a block for each (ceil(f / (moeWarps·fpw)) features, each of up
// to min(e, units) chosen experts); blocks past the experts chosen exit.
func (be *Backend) expertWindow(s *steps, d expertShape, name string, x, w *Buffer, wt int32, ids, y *Buffer, f int) (*steps, error) {
	slots := min(d.e, d.units)
	fpw := moeWindowFPW(f, slots, be.kernels.sms, be.moeWindowFPW)
	blocks := (int64(f) + int64(moeWarps*fpw) - 1) / int64(moeWarps*fpw)
	if blocks > 1<<31-1 {
		return nil, fmt.Errorf("%s: %d features: %d blocks, over the grid's limit", d.op, f, blocks)
	}
	vec := int32(0)
	if (d.nIn*w.store.Size())%16 == 0 && w.ptr%16 == 0 && x.ptr%16 == 0 {
		vec = 1
	}
	s.add(name, [3]uint32{uint32(blocks), uint32(slots), 1}, [3]uint32{32 * moeWarps, 1, 1}, 0,
		x.ptr, w.ptr, wt, ids.ptr, y.ptr, int32(d.units), int32(d.k), int32(d.e), int32(f), int32(d.nIn), d.perUnit, vec, int32(fpw), be.errRec)
	return s, nil
}

// warpGrid is the grid of the warp form: a warp per (unit, feature).
func (d expertShape) warpGrid() ([3]uint32, error) {
	blocks := (int64(d.units)*int64(d.nOut) + moeWarps - 1) / moeWarps
	if blocks > 1<<31-1 {
		return [3]uint32{}, fmt.Errorf("%s: %d units of %d features: %d blocks, over the grid's limit", d.op, d.units, d.nOut, blocks)
	}
	return [3]uint32{uint32(blocks), 1, 1}, nil
}

// tileGrid is the grid of the grouped form's tiles: (blocks of features,
// experts).
func (d expertShape) tileGrid() [3]uint32 {
	return [3]uint32{uint32((d.nOut + moeTile - 1) / moeTile), uint32(d.e), 1}
}

// expertGrouped appends an expert product's grouped form to s: the units'
// offsets by expert (e+1 ints) and their list (units ints) in scratch,
// then the tiled product tile appends, reading them.
func (be *Backend) expertGrouped(s *steps, d expertShape, ids *Buffer, tile func(offs, list cu.DevicePtr)) (*steps, error) {
	offs, err := be.scratchAlloc(4 * (d.e + 1 + d.units))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.op, err)
	}
	list := offs + cu.DevicePtr(4*(d.e+1))
	be.addGroup(s, d, ids, offs, list, 0, 0, 0, 0)
	tile(offs, list)
	return s, nil
}

// addGroup appends moe_expert_group to s, the one launch of it for both
// expert products and both grouped forms: the units of d grouped by expert
// (bad ids reported) into offs (e+1 ints) and list (units ints), in unit
// order within each expert with rank (moe_expert_rank's, units ints), in no
// particular order with rank 0; with tm > 0 also cut into tiles of tm
// units, toffs (e+1 ints) each expert's first tile and tiles (up to
// moeMaxTiles ints) the expert of each; tm 0 makes none (toffs and tiles 0).
func (be *Backend) addGroup(s *steps, d expertShape, ids *Buffer, offs, list, rank cu.DevicePtr, tm int, toffs, tiles cu.DevicePtr) {
	s.add("moe_expert_group", [3]uint32{1, 1, 1}, [3]uint32{moeGroupThreads, 1, 1}, uint32(4*d.e),
		ids.ptr, int32(d.units), int32(d.k), int32(d.e), offs, list, rank, int32(tm), toffs, tiles, be.errRec)
}

// moeMaxTiles is the most tiles of moeMMAUnits units that units units
// routed to e experts can make, whatever the routing: Σ_e ⌈c_e / BM⌉ over
// the counts c_e ≥ 0 summing to units, at most one partial tile for each of
// the at most min(e, units) experts with units.
func moeMaxTiles(units, e int) int {
	return (units + min(e, units)*(moeMMAUnits-1)) / moeMMAUnits
}

// expertMMA appends an expert product's tensor-core form to s: kernel
// name, moe_expert_mma over the experts that the arguments wargs give
// (after x; vw, the last argument, says whether they take vector loads).
// In scratch: offs (e+1 ints) and the units' list
// (units) as expertGrouped's, in unit order within each expert (rank, units
// ints, from moe_expert_rank); toffs (e+1) and tiles, the expert of each
// tile of moeMMAUnits units. The grid has a block for every tile there can
// be whatever the ids (moeMaxTiles: a recorded plan replays with others);
// moe_expert_mma's blocks past the real tiles exit at once. Activations are
// rounded once to the weights' type (kernels/moe.cu's moe_expert_mma words
// the error).
func (be *Backend) expertMMA(s *steps, d expertShape, x *Buffer, name string, wargs []any, vw int32, ids, y *Buffer) (*steps, error) {
	tiles := moeMaxTiles(d.units, d.e)
	if tiles > 65535 {
		return nil, fmt.Errorf("%s: %d units over %d experts: up to %d tiles of %d units, over the grid's limit of 65535",
			d.op, d.units, d.e, tiles, moeMMAUnits)
	}
	offs, err := be.scratchAlloc(4 * (2*(d.e+1) + 2*d.units + tiles))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.op, err)
	}
	toffs := offs + cu.DevicePtr(4*(d.e+1))
	list := toffs + cu.DevicePtr(4*(d.e+1))
	rank := list + cu.DevicePtr(4*d.units)
	tile := rank + cu.DevicePtr(4*d.units)
	s.add("moe_expert_rank", [3]uint32{uint32((d.units + moeRankWarps - 1) / moeRankWarps), 1, 1}, [3]uint32{32 * moeRankWarps, 1, 1}, 0,
		ids.ptr, int32(d.units), rank)
	be.addGroup(s, d, ids, offs, list, rank, moeMMAUnits, toffs, tile)
	vx := int32(0)
	if d.nIn%4 == 0 && x.ptr%16 == 0 {
		vx = 1
	}
	args := append(append([]any{x.ptr}, wargs...),
		offs, toffs, tile, list, y.ptr, int32(d.k), int32(d.e), int32(d.nOut), int32(d.nIn), d.perUnit, vx, vw)
	s.add(name, [3]uint32{uint32((d.nOut + moeMMAFeats - 1) / moeMMAFeats), uint32(tiles), 1}, [3]uint32{moeMMAThreads, 1, 1}, 0, args...)
	return s, nil
}

// bindSiLUGLU binds silu_glu: silu of the first half of every row times its
// second half.
func bindSiLUGLU(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	x, y := in[0], out[0]
	if err := f32All([]string{"x", "output"}, []*Buffer{x, y}); err != nil {
		return nil, err
	}
	f := n.Outputs[0].Shape.Last()
	if f <= 0 || y.n%f != 0 || x.n != 2*y.n {
		return nil, fmt.Errorf("silu_glu: x of %d elements, output of %d, in rows of %d", x.n, y.n, f)
	}
	s := be.newSteps()
	if y.n == 0 {
		return s, nil
	}
	g, b := grid1(int64(y.n))
	s.add("moe_silu_glu", g, b, 0, x.ptr, y.ptr, int64(y.n), int32(f))
	return s, nil
}

// bindMoECombine binds moe_combine: the weighted sum of the expert units
// and, with four inputs, the shared expert under its sigmoid gate.
func bindMoECombine(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if len(in) != 2 && len(in) != 4 {
		return nil, fmt.Errorf("moe_combine takes y, w and optionally s, sg; got %d inputs", len(in))
	}
	names := []string{"y", "w", "output"}
	bufs := []*Buffer{in[0], in[1], out[0]}
	if len(in) == 4 {
		names = append(names, "s", "sg")
		bufs = append(bufs, in[2], in[3])
	}
	if err := f32All(names, bufs); err != nil {
		return nil, err
	}
	ys := n.Inputs[0].Shape
	if len(ys) != 3 || ys[1] <= 0 {
		return nil, fmt.Errorf("moe_combine: y %v must be [rows, k, hidden]", ys)
	}
	k, h := ys[1], ys[2]
	y, w, o := in[0], in[1], out[0]
	rows := w.n / k
	if w.n%k != 0 || y.n != rows*k*h || o.n != rows*h {
		return nil, fmt.Errorf("moe_combine: y of %d, w of %d, output of %d elements do not fit k %d, hidden %d", y.n, w.n, o.n, k, h)
	}
	var sh, sg cu.DevicePtr
	if len(in) == 4 {
		if in[2].n != rows*h || in[3].n != rows {
			return nil, fmt.Errorf("moe_combine: s of %d and sg of %d elements, want %d and %d", in[2].n, in[3].n, rows*h, rows)
		}
		sh, sg = in[2].ptr, in[3].ptr
	}
	s := be.newSteps()
	if rows*h == 0 {
		return s, nil
	}
	g, b := grid1(int64(rows * h))
	s.add("moe_combine", g, b, 0, y.ptr, w.ptr, sh, sg, o.ptr, int64(rows*h), int32(k), int32(h))
	return s, nil
}
