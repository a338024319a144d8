package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Binders of Gated DeltaNet's ops (ops/deltanet.go), whose kernels are in
// kernels/deltanet.cu: split, causal_conv, gdn_prep, gdn_gates, gdn_scan and
// gated_rmsnorm. Each is one launch, but gdn_scan of gdnChunkMinRows rows
// or more: two (its chunked form).

// gdnBinders are the binders of the Gated DeltaNet ops, by op name.
var gdnBinders = map[string]binder{
	"split":         gdnBindSplit,
	"causal_conv":   gdnBindCausalConv,
	"gdn_prep":      gdnBindPrep,
	"gdn_gates":     gdnBindGates,
	"gdn_scan":      gdnBindScan,
	"gated_rmsnorm": gdnBindGatedRMSNorm,
}

// gdnKernels are the kernels of kernels/deltanet.cu the binders launch.
var gdnKernels = []string{"gdn_split", "gdn_causal_conv", "gdn_prep", "gdn_gates", "gdn_scan", "gdn_chunk_prep", "gdn_chunk_scan",
	"gdn_gated_norm"}

// gdnKernelErr words the error codes of kernels/deltanet.cu (range 20 to
// 29). The kernels report none of their own: a bad call record comes as the
// common codes, which kernelErr words. It gives nil for every record.
func gdnKernelErr([errRecWords]int32) error { return nil }

// gdnAct is the kernels' code of an activation (GDN_ACT_* in deltanet.cu).
func gdnAct(a ops.Activation) (int32, error) {
	switch a {
	case ops.ActIdentity:
		return 0, nil
	case ops.ActSiLU:
		return 1, nil
	case ops.ActSigmoid:
		return 2, nil
	}
	return 0, fmt.Errorf("unknown activation %q", a)
}

// gdnLen checks that a buffer has the number of elements wanted.
func gdnLen(what string, b *Buffer, want int) error {
	if b.n != want {
		return fmt.Errorf("%s has %d elements, want %d", what, b.n, want)
	}
	return nil
}

// gdnBindSplit binds split: one grid-stride launch over x scattering every
// element to its part's output, through a table of the outputs' addresses
// and the parts' offsets in a repetition.
func gdnBindSplit(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.SplitAttrs](n)
	if err != nil {
		return nil, err
	}
	x := in[0]
	if err := f32("x", x); err != nil {
		return nil, err
	}
	if at.Heads <= 0 || len(at.Parts) == 0 || len(out) != len(at.Parts) {
		return nil, fmt.Errorf("split: %d outputs for parts %v of %d heads", len(out), at.Parts, at.Heads)
	}
	width := n.Inputs[0].Shape.Last()
	per := 0
	offs := make([]byte, 0, 4*(len(at.Parts)+1))
	for _, p := range at.Parts {
		if p <= 0 {
			return nil, fmt.Errorf("split: part widths %v must be positive", at.Parts)
		}
		offs = binary.LittleEndian.AppendUint32(offs, uint32(per))
		per += p
	}
	offs = binary.LittleEndian.AppendUint32(offs, uint32(per))
	if width <= 0 || per*at.Heads != width || x.n%width != 0 {
		return nil, fmt.Errorf("split: parts %v of %d heads do not make rows of %d (x has %d elements)", at.Parts, at.Heads, width, x.n)
	}
	reps := x.n / per
	var ptrs []byte
	for i, p := range at.Parts {
		what := fmt.Sprintf("output %d", i)
		if err := f32(what, out[i]); err != nil {
			return nil, err
		}
		if err := gdnLen(what, out[i], reps*p); err != nil {
			return nil, err
		}
		ptrs = binary.LittleEndian.AppendUint64(ptrs, uint64(out[i].ptr))
	}
	s := be.newSteps()
	if x.n == 0 {
		return s, nil
	}
	pp, err := be.upload(ptrs)
	if err != nil {
		return nil, err
	}
	op, err := be.upload(offs)
	if err != nil {
		return nil, err
	}
	g, b := grid1(int64(x.n))
	s.add("gdn_split", g, b, 0, x.ptr, pp, op, int32(len(at.Parts)), int32(per), int64(x.n))
	return s, nil
}

// gdnConvChunk is the fewest rows one gdn_causal_conv thread computes (at
// least the ring's rows, so that only the first chunk reads the ring).
const gdnConvChunk = 16

// gdnBindCausalConv binds causal_conv: one thread per (channel, chunk of
// rows); the first chunk's threads then update the ring.
func gdnBindCausalConv(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.ConvAttrs](n)
	if err != nil {
		return nil, err
	}
	act, err := gdnAct(at.Act)
	if err != nil {
		return nil, fmt.Errorf("causal_conv: %w", err)
	}
	x, w, ring, call, y := in[0], in[1], in[2], in[3], out[0]
	if err := f32All([]string{"x", "ring", "output"}, []*Buffer{x, ring, y}); err != nil {
		return nil, err
	}
	wt, err := wtype(w)
	if err != nil {
		return nil, fmt.Errorf("w: %w", err)
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	xs := n.Inputs[0].Shape
	if len(xs) != 2 {
		return nil, fmt.Errorf("x %s must be [rows, channels]", n.Inputs[0])
	}
	rows, c := xs[0], xs[1]
	k := n.Inputs[1].Shape.Last()
	if at.Dilation <= 0 || k < 2 {
		return nil, fmt.Errorf("causal_conv: kernel %d with dilation %d", k, at.Dilation)
	}
	r := (k - 1) * at.Dilation
	if err := gdnLen("x", x, rows*c); err != nil {
		return nil, err
	}
	if err := gdnLen("output", y, rows*c); err != nil {
		return nil, err
	}
	if err := gdnLen("w", w, c*k); err != nil {
		return nil, err
	}
	if err := gdnLen("ring", ring, r*c); err != nil {
		return nil, err
	}
	s := be.newSteps()
	if rows*c == 0 {
		return s, nil
	}
	chunk := max(r, gdnConvChunk)
	if (rows+chunk-1)/chunk > 65535 {
		chunk = (rows + 65534) / 65535
	}
	threads := threadsFor(c, 128)
	grid := [3]uint32{uint32((c + int(threads) - 1) / int(threads)), uint32((rows + chunk - 1) / chunk), 1}
	s.add("gdn_causal_conv", grid, [3]uint32{threads, 1, 1}, 0, x.ptr, w.ptr, wt, ring.ptr, call.ptr, be.errRec, y.ptr,
		int32(rows), int32(c), int32(k), int32(at.Dilation), act, int32(chunk))
	return s, nil
}

// gdnPrepVSpan is the v elements one gdn_prep block copies, in elements per
// thread.
const gdnPrepVSpan = 8

// gdnBindPrep binds gdn_prep: one block per (row, query or key head) and a
// few per row copying v.
func gdnBindPrep(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.GDNPrepAttrs](n)
	if err != nil {
		return nil, err
	}
	nk, dk := at.KeyHeads, at.KeyDim
	if nk <= 0 || dk <= 0 || at.ValueHeads <= 0 || at.ValueDim <= 0 {
		return nil, fmt.Errorf("gdn_prep: %d key heads of %d, %d value heads of %d", nk, dk, at.ValueHeads, at.ValueDim)
	}
	mix, q, k, v := in[0], out[0], out[1], out[2]
	if err := f32All([]string{"mix", "q", "k", "v"}, []*Buffer{mix, q, k, v}); err != nil {
		return nil, err
	}
	kd, vd := nk*dk, at.ValueHeads*at.ValueDim
	rows := n.Inputs[0].Shape[0]
	for _, c := range []struct {
		what string
		b    *Buffer
		want int
	}{{"mix", mix, rows * (2*kd + vd)}, {"q", q, rows * kd}, {"k", k, rows * kd}, {"v", v, rows * vd}} {
		if err := gdnLen(c.what, c.b, c.want); err != nil {
			return nil, err
		}
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	threads := threadsFor(dk, 256)
	vspan := int(threads) * gdnPrepVSpan
	vchunks := (vd + vspan - 1) / vspan
	if 2*nk+vchunks > 65535 {
		return nil, fmt.Errorf("gdn_prep: %d key heads and %d value elements are too many for one launch", nk, vd)
	}
	scale := float32(1 / math.Sqrt(float64(dk)))
	s.add("gdn_prep", [3]uint32{uint32(rows), uint32(2*nk + vchunks), 1}, [3]uint32{threads, 1, 1}, 0,
		mix.ptr, q.ptr, k.ptr, v.ptr, int32(nk), int32(dk), int32(vd), at.Eps, scale, int32(vspan))
	return s, nil
}

// gdnBindGates binds gdn_gates: one grid-stride launch over the rows'
// value heads.
func gdnBindGates(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	a, b, aLog, dtBias, g, beta := in[0], in[1], in[2], in[3], out[0], out[1]
	if err := f32All([]string{"a", "b", "g", "beta"}, []*Buffer{a, b, g, beta}); err != nil {
		return nil, err
	}
	wa, err := wtype(aLog)
	if err != nil {
		return nil, fmt.Errorf("A_log: %w", err)
	}
	wd, err := wtype(dtBias)
	if err != nil {
		return nil, fmt.Errorf("dt_bias: %w", err)
	}
	nv := n.Inputs[0].Shape.Last()
	if nv <= 0 || a.n%nv != 0 {
		return nil, fmt.Errorf("gdn_gates: a of %d elements is not rows of %d value heads", a.n, nv)
	}
	for _, c := range []struct {
		what string
		b    *Buffer
		want int
	}{{"b", b, a.n}, {"g", g, a.n}, {"beta", beta, a.n}, {"A_log", aLog, nv}, {"dt_bias", dtBias, nv}} {
		if err := gdnLen(c.what, c.b, c.want); err != nil {
			return nil, err
		}
	}
	s := be.newSteps()
	if a.n == 0 {
		return s, nil
	}
	gr, bl := grid1(int64(a.n))
	s.add("gdn_gates", gr, bl, 0, a.ptr, b.ptr, aLog.ptr, wa, dtBias.ptr, wd, g.ptr, beta.ptr, int64(a.n), int32(nv))
	return s, nil
}

// gdn_scan's launch shape (GDN_SCAN_RP and the launch bound in deltanet.cu).
const (
	// gdnScanRP is the most state rows a thread keeps.
	gdnScanRP = 16
	// gdnScanThreads is the largest block.
	gdnScanThreads = 512
	// gdnScanNominal is the block size aimed at.
	gdnScanNominal = 256
	// gdnScanMinCols is the narrowest column tile the split for more
	// blocks goes down to (8 floats: one 32-byte sector of a state row).
	gdnScanMinCols = 8
	// gdnScanStage is the rows staged in shared memory at a time.
	gdnScanStage = 8
	// gdnScanShared is the shared memory a block may take.
	gdnScanShared = 48 * 1024
)

// gdnScanShape picks gdn_scan's column tile cw, block size and rows staged
// at a time for nv heads of a dk×dv state on sms multiprocessors: tiles
// narrow until the blocks fill the multiprocessors twice (a decode step is
// then spread over many blocks), and the block has enough groups of cw
// threads that each keeps at most gdnScanRP state rows.
func gdnScanShape(nv, dk, dv, sms int) (cw, threads, tc, shared int, err error) {
	cw = 32
	for cw > 1 && cw >= 2*dv {
		cw /= 2
	}
	for cw > gdnScanMinCols && nv*((dv+cw-1)/cw) < 2*sms {
		cw /= 2
	}
	groups := max(min(gdnScanNominal/cw, dk), (dk+gdnScanRP-1)/gdnScanRP)
	for groups*cw > gdnScanThreads && cw > 1 {
		cw /= 2
	}
	threads = (groups*cw + 31) / 32 * 32
	if threads > gdnScanThreads {
		return 0, 0, 0, 0, fmt.Errorf("gdn_scan: key dim %d needs more than %d threads a block", dk, gdnScanThreads)
	}
	nw := threads / 32
	for tc = gdnScanStage; tc >= 1; tc /= 2 {
		shared = 4 * (2*tc*dk + tc*cw + 2*tc + 2*nw*cw)
		if shared <= gdnScanShared {
			return cw, threads, tc, shared, nil
		}
	}
	return 0, 0, 0, 0, fmt.Errorf("gdn_scan: key dim %d does not fit in shared memory", dk)
}

// gdnBindScan binds gdn_scan: one block per (value head, column tile of
// the state), each running the call's rows in order.
func gdnBindScan(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	q, k, v, g, beta, st, call, o := in[0], in[1], in[2], in[3], in[4], in[5], in[6], out[0]
	if err := f32All([]string{"q", "k", "v", "g", "beta", "S", "output"}, []*Buffer{q, k, v, g, beta, st, o}); err != nil {
		return nil, err
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	ss, qs := n.Inputs[5].Shape, n.Inputs[0].Shape
	if len(ss) != 3 || len(qs) != 2 {
		return nil, fmt.Errorf("gdn_scan: S %s must be [value heads, key dim, value dim], q %s [rows, key width]", n.Inputs[5], n.Inputs[0])
	}
	nv, dk, dv := ss[0], ss[1], ss[2]
	rows, kd := qs[0], qs[1]
	if nv <= 0 || dk <= 0 || dv <= 0 || kd <= 0 || kd%dk != 0 || nv%(kd/dk) != 0 {
		return nil, fmt.Errorf("gdn_scan: q of %d per row does not fit state %v", kd, ss)
	}
	nk := kd / dk
	for _, c := range []struct {
		what string
		b    *Buffer
		want int
	}{{"q", q, rows * kd}, {"k", k, rows * kd}, {"v", v, rows * nv * dv}, {"g", g, rows * nv}, {"beta", beta, rows * nv},
		{"S", st, nv * dk * dv}, {"output", o, rows * nv * dv}} {
		if err := gdnLen(c.what, c.b, c.want); err != nil {
			return nil, err
		}
	}
	if nv > 65535 {
		return nil, fmt.Errorf("gdn_scan: %d value heads: at most 65535", nv)
	}
	if rows >= gdnChunkMinRows && dk <= gdnChunkMaxDK && !be.gdnRowByRow {
		return gdnBindScanChunked(be, in, out, rows, nk, nv, dk, dv)
	}
	cw, threads, tc, shared, err := gdnScanShape(nv, dk, dv, be.kernels.sms)
	if err != nil {
		return nil, err
	}
	tiles := (dv + cw - 1) / cw
	s := be.newSteps()
	// Zero rows still launch: a call at position 0 clears S, as on the CPU.
	s.add("gdn_scan", [3]uint32{uint32(tiles), uint32(nv), 1}, [3]uint32{uint32(threads), 1, 1}, uint32(shared),
		q.ptr, k.ptr, v.ptr, g.ptr, beta.ptr, st.ptr, call.ptr, be.errRec, o.ptr,
		int32(rows), int32(nk), int32(nv), int32(dk), int32(dv), int32(cw), int32(tc))
	return s, nil
}

// gdn_scan's chunked form (gdn_chunk_prep and gdn_chunk_scan; GDN_CK,
// GDN_CK_COLS and GDN_CK_RP in deltanet.cu).
const (
	// gdnChunkMinRows is the fewest rows gdn_scan takes in chunks: fewer
	// (decode, speculation windows) step through the rows one at a time.
	// Both forms meet TolF32 (optest.TestScanChunkedF32).
	gdnChunkMinRows = 16
	// gdnChunk is the rows of a chunk.
	gdnChunk = 64
	// gdnChunkCols is the state columns of a gdn_chunk_scan block.
	gdnChunkCols = 32
	// gdnChunkMaxDK is the largest key dim of the chunked form (8 warps
	// of 4·GDN_CK_RP state rows); a larger one takes the recurrent kernel.
	gdnChunkMaxDK = 128
	// gdnChunkWS is the workspace floats of a (chunk, value head).
	gdnChunkWS = 2*gdnChunk*gdnChunk + 2*gdnChunk
	// gdnChunkThreads is the block of both kernels (their launch bound).
	gdnChunkThreads = 256
)

// gdnChunkShared is the dynamic shared memory in bytes of gdn_chunk_prep
// and gdn_chunk_scan for key dim dk (the sums in their comments).
func gdnChunkShared(dk int) (prep, scan int) {
	ks, dkp := dk+1, (dk+3)&^3
	prep = 4 * (3*gdnChunk + gdnChunk*ks + max(gdnChunk*ks, 2*gdnChunk*(gdnChunk+1)))
	scan = 4 * (dkp*gdnChunkCols + gdnChunk*dkp + max(gdnChunk*dkp, 2*gdnChunk*gdnChunk) + 2*gdnChunk*gdnChunkCols + 3*gdnChunk)
	return prep, scan
}

// gdnChunkKernels are the chunked kernels with their most dynamic shared
// memory (at gdnChunkMaxDK: under 99 KiB, which every card from sm_80 can
// give a block); loadKernels raises their limit to it.
func gdnChunkKernels() map[string]int {
	prep, scan := gdnChunkShared(gdnChunkMaxDK)
	return map[string]int{"gdn_chunk_prep": prep, "gdn_chunk_scan": scan}
}

// gdnBindScanChunked binds gdn_scan's chunked form: gdn_chunk_prep, one
// block per (chunk, value head), writes each chunk's triangular factors
// and decays into workspace (the backend's gdn scratch, shared by the
// gdn_scan nodes), then gdn_chunk_scan, one block per (column tile, value
// head), runs the chunks in order.
func gdnBindScanChunked(be *Backend, in, out []*Buffer, rows, nk, nv, dk, dv int) (*steps, error) {
	q, k, v, g, beta, st, call, o := in[0], in[1], in[2], in[3], in[4], in[5], in[6], out[0]
	chunks := (rows + gdnChunk - 1) / gdnChunk
	ws, err := be.reuse(&be.gdn, 4*chunks*nv*gdnChunkWS)
	if err != nil {
		return nil, fmt.Errorf("gdn_scan: %w", err)
	}
	prep, scan := gdnChunkShared(dk)
	block := [3]uint32{gdnChunkThreads, 1, 1}
	s := be.newSteps()
	s.add("gdn_chunk_prep", [3]uint32{uint32(chunks), uint32(nv), 1}, block, uint32(prep),
		q.ptr, k.ptr, g.ptr, beta.ptr, call.ptr, be.errRec, ws, int32(rows), int32(nk), int32(nv), int32(dk))
	s.add("gdn_chunk_scan", [3]uint32{uint32((dv + gdnChunkCols - 1) / gdnChunkCols), uint32(nv), 1}, block, uint32(scan),
		q.ptr, k.ptr, v.ptr, beta.ptr, ws, st.ptr, call.ptr, be.errRec, o.ptr, int32(rows), int32(nk), int32(nv), int32(dk), int32(dv))
	return s, nil
}

// gdnBindGatedRMSNorm binds gated_rmsnorm: one block per run of Group
// elements; the output may be o's buffer.
func gdnBindGatedRMSNorm(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.GatedRMSNormAttrs](n)
	if err != nil {
		return nil, err
	}
	act, err := gdnAct(at.Act)
	if err != nil {
		return nil, fmt.Errorf("gated_rmsnorm: %w", err)
	}
	o, z, w, y := in[0], in[1], in[2], out[0]
	if err := f32All([]string{"o", "z", "output"}, []*Buffer{o, z, y}); err != nil {
		return nil, err
	}
	wt, err := wtype(w)
	if err != nil {
		return nil, fmt.Errorf("w: %w", err)
	}
	grp := at.Group
	if grp <= 0 || o.n%grp != 0 {
		return nil, fmt.Errorf("gated_rmsnorm: group %d does not divide o of %d elements", grp, o.n)
	}
	for _, c := range []struct {
		what string
		b    *Buffer
		want int
	}{{"z", z, o.n}, {"output", y, o.n}, {"w", w, grp}} {
		if err := gdnLen(c.what, c.b, c.want); err != nil {
			return nil, err
		}
	}
	s := be.newSteps()
	if o.n == 0 {
		return s, nil
	}
	s.add("gdn_gated_norm", [3]uint32{uint32(o.n / grp), 1, 1}, [3]uint32{threadsFor(grp, 256), 1, 1}, 0,
		o.ptr, z.ptr, w.ptr, wt, y.ptr, int32(grp), at.Eps, act)
	return s, nil
}
