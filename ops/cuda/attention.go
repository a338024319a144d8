package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of kv_write and attention; the kernels are in
// kernels/attention.cu and kernels/elementwise.cu (kv_write).

func bindKVWrite(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.SlotAttrs](n)
	if err != nil {
		return nil, err
	}
	rows, slot, call := in[0], in[1], in[2]
	if err := f32All([]string{"rows", "slot"}, []*Buffer{rows, slot}); err != nil {
		return nil, err
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	w := n.Inputs[1].Shape.Last()
	if w <= 0 || rows.n%w != 0 || slot.n%w != 0 {
		return nil, fmt.Errorf("rows of %d and a slot of %d elements are not whole rows of %d", rows.n, slot.n, w)
	}
	t := rows.n / w
	s := be.newSteps()
	if t == 0 {
		return s, nil
	}
	ring := int32(0)
	if at.Ring {
		ring = 1
	}
	s.add("kv_write", [3]uint32{uint32(t), 1, 1}, [3]uint32{threadsFor(w, 256), 1, 1}, 0,
		rows.ptr, slot.ptr, call.ptr, be.errRec, int32(t), int32(w), int32(slot.n/w), ring)
	return s, nil
}

// attnMaxGroup is ATTN_MAX_GROUP of attention.cu: the most query heads per
// KV head.
const attnMaxGroup = 16

// attnMaxSplit is ATTN_MAX_SPLIT of attention.cu: the most parts a
// block's sum over keys is split into.
const attnMaxSplit = 8

// attnChunkMax is the most keys one attn_part block scores.
const attnChunkMax = 1024

// attnChunkMin is the fewest keys per chunk the split aims at (a chunk has
// fewer only when the span itself is shorter).
const attnChunkMin = 16

// attnBlocksPerSM is the attn_part blocks per multiprocessor the split aims
// at (the kernels' __launch_bounds__ let two be resident).
const attnBlocksPerSM = 2

// attnFinishDims is the dimensions of a head one attn_finish block merges
// when the head divides into them.
const attnFinishDims = 64

// attnThreads is the block size of attn_part and attn_finish (attn_part's
// __launch_bounds__).
const attnThreads = 256

func bindAttention(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.AttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	return be.attention(at, in[0], in[1], in[2], in[3], out[0], nil, nil)
}

// attention binds attention, or attention_gate when the gate g and its
// scale sg are not nil: prompt chunks on the flash kernel (half
// precision), else attn_dec over (row, kv head, key chunk), merging the
// chunks and gating them in the same launch, where it takes the shape
// (planAttnDec: from attnDecMinRows rows unless be.attnDec forces a form)
// and its program compiled; else attn_part over (row, kv head, key chunk),
// then attn_finish merging the chunks of each (row, head) and gating them.
func (be *Backend) attention(at ops.AttentionAttrs, q, k, v, call, y, g, sg *Buffer) (*steps, error) {
	var gp, sp cu.DevicePtr
	if g != nil {
		if err := f32All([]string{"g", "s"}, []*Buffer{g, sg}); err != nil {
			return nil, err
		}
		if g.n != q.n || sg.n != at.Heads*at.HeadDim {
			return nil, fmt.Errorf("attention_gate: g of %d and s of %d elements for q of %d in rows of %d", g.n, sg.n, q.n, at.Heads*at.HeadDim)
		}
		gp, sp = g.ptr, sg.ptr
	}
	if err := f32All([]string{"q", "k", "v", "output"}, []*Buffer{q, k, v, y}); err != nil {
		return nil, err
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	d := at.HeadDim
	if at.Heads <= 0 || at.KVHeads <= 0 || d <= 0 || at.Heads%at.KVHeads != 0 || at.Window < 0 {
		return nil, fmt.Errorf("attention: heads %d over kv heads %d of %d, window %d", at.Heads, at.KVHeads, d, at.Window)
	}
	qw, kw, groups := at.Heads*d, at.KVHeads*d, at.Heads/at.KVHeads
	if groups > attnMaxGroup {
		return nil, fmt.Errorf("attention: %d query heads per kv head: the kernel takes at most %d", groups, attnMaxGroup)
	}
	if q.n%qw != 0 || y.n != q.n || k.n%kw != 0 || v.n != k.n {
		return nil, fmt.Errorf("attention: q of %d, output of %d, k of %d, v of %d elements do not fit %d query and %d kv heads of %d",
			q.n, y.n, k.n, v.n, at.Heads, at.KVHeads, d)
	}
	rows, capacity := q.n/qw, k.n/kw
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	ring, span := attnSlot(at, capacity, rows)
	if fd := flashDim(d); rows >= flashMinRows && fd > 0 && be.halfAttention() {
		if fk := be.flashFor(fd); groups <= fk.rows() {
			return be.flash(s, at, fk, q, k, v, call, y, gp, sp, rows, capacity, ring)
		}
	}
	vec := d%4 == 0 && aligned16(q.ptr, k.ptr, v.ptr)
	if !be.attnDec.old && vec && aligned16(y.ptr, gp, sp) {
		if p, ok, err := planAttnDec(rows, at.KVHeads, groups, d, span, be.kernels.sms, be.attnDec); err != nil {
			return nil, err
		} else if ok && be.kernels.fn[p.kernel] != nil { // else its program did not compile (logged at load)
			return be.attnDecode(s, p, at, q, k, v, call, y, gp, sp, rows, capacity, ring)
		}
	}
	if err := be.attnPart(s, at, q, k, v, call, y, gp, sp, rows, capacity, span, ring, vec, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// attnSlot is how the kernels read a slot of capacity rows for rows rows
// of attention at: ring 1 when it is a ring that holds them (else a ring
// too short to wrap is read as a linear slot), and the span of keys a row
// may see (the window, or the capacity; at least 1).
func attnSlot(at ops.AttentionAttrs, capacity, rows int) (ring int32, span int) {
	if ops.RingHolds(at, capacity, rows) {
		ring = 1
	}
	span = capacity
	if at.Window > 0 {
		span = min(at.Window, capacity)
	}
	return ring, max(span, 1)
}

// attnPrepIn is what attn_part's prep form (attn_prep_*, one row of
// qkv_attention_gate) reads besides attn_part's own (kernels/attention.cu's
// attnPrep): the row's raw key and value rows, the rotary table and
// attention factor, the queries' scale (0 for none), the rotary width and
// the norms' epsilon.
type attnPrepIn struct {
	k, v *Buffer
	freq cu.DevicePtr
	m    float64
	sq   cu.DevicePtr
	rot  int
	eps  float32
}

// attnPart appends attn_part over (row, kv head, key chunk) and attn_finish
// merging the chunks of each (row, head), gated by gp and sp when they are
// not 0; with prep, attn_part's prep form (q the raw queries: vec and
// groups of 1, 2, 4 or 8 only, which the caller checks). Chunks: enough
// blocks to fill the SMs twice, each at most attnChunkMax keys and within
// 48 KiB of shared memory with the group's queries, and at least
// attnChunkMin keys, so that a block's loads are many and the partials the
// finish reads few. The kernel splits each row's keys evenly over the
// chunks at run time.
func (be *Backend) attnPart(s *steps, at ops.AttentionAttrs, q, k, v, call, y *Buffer, gp, sp cu.DevicePtr, rows, capacity, span int, ring int32,
	vec bool, prep *attnPrepIn) error {
	d, groups := at.HeadDim, at.Heads/at.KVHeads
	extra := 0 // the prep form's key being prepared
	if prep != nil {
		extra = d
	}
	splits := attnSplits(rows*at.KVHeads, span, be.kernels.sms, be.attnDec)
	chunk := (span + splits - 1) / splits
	limit := (48*1024/4 - groups*d - extra) / (groups + 1)
	if limit < 32 {
		return fmt.Errorf("attention: %d query heads per kv head of %d do not fit in shared memory", groups, d)
	}
	chunk = min(chunk, attnChunkMax, limit)
	splits = (span + chunk - 1) / chunk
	pm, pl, pacc, err := be.attnParts(rows*at.Heads*splits, d)
	if err != nil {
		return err
	}
	vec = vec && aligned16(pacc)
	fixed := groups == 1 || groups == 2 || groups == 4 || groups == 8 // a group size with kernels of its own
	part := "attn_part_s"
	switch {
	case vec && fixed:
		part = fmt.Sprintf("attn_part_v%d", groups)
	case vec:
		part = "attn_part_vx"
	}
	args := []any{q.ptr, k.ptr, v.ptr, call.ptr, be.errRec, pm, pl, pacc, int32(rows), int32(at.Heads), int32(at.KVHeads), int32(d),
		int32(capacity), int32(at.Window), ring, at.Scale, int32(chunk)}
	if prep != nil {
		if !vec || !fixed {
			return fmt.Errorf("attention: the prep form takes heads of a multiple of 4 dimensions in groups of 1, 2, 4 or 8, not %d of %d", groups, d)
		}
		part = fmt.Sprintf("attn_prep_v%d", groups)
		args = append(args, prep.k.ptr, prep.v.ptr, k.ptr, v.ptr, prep.freq, prep.m, prep.sq, int32(prep.rot), prep.eps)
	}
	shared := uint32(4 * (groups*d + groups*chunk + chunk + extra))
	s.add(part, [3]uint32{uint32(rows), uint32(at.KVHeads), uint32(splits)}, [3]uint32{attnThreads, 1, 1}, shared, args...)
	addAttnFinish(s, pm, pl, pacc, y, call, rows, at.Heads, d, splits, gp, sp, vec)
	return nil
}

// addAttnFinish adds attn_finish, merging the splits partials (pm, pl,
// pacc) of each of rows rows' heads query heads of d into y, gated by g
// and its scale sg when they are not 0; vec says d is a multiple of 4 and
// pacc 16-byte aligned. The finish splits each head's dimensions over blocks of 64
// when they divide evenly, so that many blocks share the partials' reads.
func addAttnFinish(s *steps, pm, pl, pacc cu.DevicePtr, y, call *Buffer, rows, heads, d, splits int, g, sg cu.DevicePtr, vec bool) {
	dsplit := 1
	if d%attnFinishDims == 0 {
		dsplit = d / attnFinishDims
	}
	fvec := int32(0)
	if vec && (d/dsplit)%4 == 0 {
		fvec = 1
	}
	s.add("attn_finish", [3]uint32{uint32(rows), uint32(heads), uint32(dsplit)}, [3]uint32{attnThreads, 1, 1}, uint32(4*(2*splits+d/dsplit)),
		pm, pl, pacc, y.ptr, call.ptr, int32(rows), int32(heads), int32(d), int32(splits), g, sg, fvec)
}

// halfAttention says whether attention of prompt chunks takes the flash
// kernel, rounding to f16 (see Precision).
func (be *Backend) halfAttention() bool {
	switch be.opts.Precision {
	case PrecisionHalf:
		return true
	case PrecisionAuto:
		return be.lowWeights
	}
	return false
}

// flashMinRows is the fewest query rows that take the flash kernel (fewer
// take attn_part and attn_finish, which split the keys over blocks instead).
const flashMinRows = ops.AttentionChunkRows

// flashDim is the flash kernels' head dimension for heads of d: the
// smallest compiled that holds d (a head is padded with zeros to it), 0
// past the largest.
func flashDim(d int) int {
	fd := 0
	for _, k := range flashKernels {
		if d <= k.dim && (fd == 0 || k.dim < fd) {
			fd = k.dim
		}
	}
	return fd
}

// flashKernel is one compiled flash kernel: its body's template arguments
// (warps, keys a tile) and the variant it belongs to (REEL_FLASH_VARIANT).
type flashKernel struct {
	name        string
	dim         int
	warps, keys int
	variant     string
}

// The flash variants: narrow and wide (flash_body) with 4 and 8 warps,
// each warp taking 16 rows against a whole tile; widep is wide with the
// fragments loaded a step ahead of the products; wg (flash_wg_body,
// Hopper's wgmma, compiled for sm_90a on sm_90 cards only) is two
// warpgroups of 64 rows each.
const (
	flashNarrow = "narrow"
	flashWide   = "wide"
	flashWideP  = "widep"
	flashWG     = "wg"
)

// flashOrder is the variants' order of preference where the backend names
// none or its choice is not compiled for a dimension: at 256 dimensions
// wg where the card has it (flashOrderFor), then widep (compiled for 256
// dimensions), then wide, then narrow (the only one of 32). Measured
// on the H200 at Dory 4B's 256-dimension shapes (TestFlashSweep; TFLOP/s
// for the global layer of 2048, the window on its ring, the ring at
// position 2048): session 5: widep 93.7/83.8/92.8, wide 91.8/81.9/91.6,
// narrow 87.5/78.1/90.1. Removed after measuring no better: two variants
// that split a tile's products among the warps (session 5: 91.4/81.7/88.8
// and 82.9/73.9/85.7), and FlashAttention-2's loop (one buffer each of K
// and V) as 4 warps of 16 rows, two blocks an SM (fa2: 68.6/64.6/74.4), or
// 12 and 16 warps two to each 16 rows, splitting the dimensions (83.5/
// 82.6/81.4 and 81.1/77.0/92.1; widep 93.2/83.8/92.8 in the same session 6
// run). wg, session 6 (each layer on its default grid): 129.4/107.6/111.2
// against widep's 103.1/84.4/91.1 in the same run, the same output bits
// (TestFlashAgree); Dory 4B's 2048-token prompt 31,032 -> 32,486 tok/s.
var flashOrder = []string{flashWideP, flashWide, flashNarrow}

// flashOrderFor is the default order at fd dimensions: wg first at 256,
// the dimension it was measured at (its 128-dimension kernel is taken
// only where asked for), then flashOrder.
func flashOrderFor(fd int) []string {
	if fd == 256 {
		return append([]string{flashWG}, flashOrder...)
	}
	return flashOrder
}

// flashVariants are the variants' names, for REEL_FLASH_VARIANT.
var flashVariants = []string{flashNarrow, flashWide, flashWideP, flashWG}

// flashKernels are the compiled flash kernels.
var flashKernels = []flashKernel{
	{"flash_d32", 32, 4, 64, flashNarrow}, {"flash_d64", 64, 4, 64, flashNarrow},
	{"flash_d128", 128, 4, 64, flashNarrow}, {"flash_d256", 256, 4, 32, flashNarrow},
	{"flash_wide_d64", 64, 8, 64, flashWide}, {"flash_wide_d128", 128, 8, 64, flashWide},
	{"flash_wide_d256", 256, 8, 64, flashWide}, {"flash_widep_d256", 256, 8, 64, flashWideP},
	{"flash_wg_d128", 128, 8, 64, flashWG}, {"flash_wg_d256", 256, 8, 64, flashWG},
}

// rows is the query rows of a block.
func (k flashKernel) rows() int { return 16 * k.warps }

// shared is the kernel's dynamic shared memory: the Q tile and two
// buffers each of K and Vᵀ tiles of f16, rows padded by 8 elements
// (flash_body); for wg unpadded (the 128-byte swizzle) after up to 1024
// bytes that align them as wgmma's descriptors need.
func (k flashKernel) shared() int {
	if k.variant == flashWG {
		return flashWGAlign + 2*(k.rows()*k.dim+2*k.keys*k.dim+2*k.dim*k.keys)
	}
	return 2 * (k.rows()*(k.dim+8) + 2*k.keys*(k.dim+8) + 2*k.dim*(k.keys+8))
}

// flashWGAlign is the alignment of flash_wg's tiles in shared memory
// (wg_align1024 of flash_wg.cu).
const flashWGAlign = 1024

// checkFlashVariant checks a variant's name ("" : the default order).
func checkFlashVariant(v string) error {
	if v == "" || slices.Contains(flashVariants, v) {
		return nil
	}
	return fmt.Errorf("flash variant %q: want one of %s", v, strings.Join(flashVariants, ", "))
}

// flashFor picks the flash kernel of dimension fd: the backend's variant
// where it is compiled for fd and for the card (wg on sm_90 only; asked
// for, a kernel whose program failed to compile is still picked, so that
// its launch reports why), else the first of flashOrderFor(fd) that is
// compiled for fd and loaded.
func (be *Backend) flashFor(fd int) flashKernel {
	for i, v := range append([]string{be.flashVariant}, flashOrderFor(fd)...) {
		for _, k := range flashKernels {
			if k.dim == fd && k.variant == v && !be.notForCard(k.name) && (i == 0 || be.loaded(k.name)) {
				return k
			}
		}
	}
	return flashKernel{}
}

// loaded says whether kernel name's program compiled (true without a
// kernel set: the tables' tests).
func (be *Backend) loaded(name string) bool {
	return be.kernels == nil || be.kernels.unavailable[name] == nil
}

// notForCard says whether kernel name's program was left out for the
// card's architecture (unitArch).
func (be *Backend) notForCard(name string) bool {
	return be.kernels != nil && errors.Is(be.kernels.unavailable[name], errNotForCard)
}

// The flash grid's orders (REEL_FLASH_GRID): "heads" puts the KV heads
// along x and the blocks of query rows along y, so that the card, which
// starts blocks in the order of their linear index, runs every head's
// heaviest blocks (the chunk's last rows) before any lighter one; "rows"
// puts each head's blocks in a run, heaviest first.
var flashGrids = []string{"heads", "rows"}

// flashHeadsFirst says whether a layer's flash grid puts the KV heads
// first: REEL_FLASH_GRID's choice, else for layers without a window. With
// one block an SM (widep) and Dory 4B's 2048-row chunk (256 blocks on 132
// SMs), heads first measured 0.369 -> 0.333 ms (93.2 -> 103.3 TFLOP/s) on
// the causal layer and 0.308 -> 0.331 ms on the window of 1024 (session 6,
// TestFlashSweep; a model of list scheduling gives the causal layer 95 vs
// 64 units and the window 34 vs 32).
func (be *Backend) flashHeadsFirst(window int) bool {
	switch be.flashGrid {
	case "heads":
		return true
	case "rows":
		return false
	}
	return window <= 0
}

// flash appends kv_half, which writes the keys and values a chunk reads as
// f16 into shared scratch, and the flash kernel over them.
func (be *Backend) flash(s *steps, at ops.AttentionAttrs, fk flashKernel, q, k, v, call, y *Buffer, gp, sp cu.DevicePtr, rows, capacity int, ring int32) (*steps, error) {
	fd := fk.dim
	// Scratch keys: every key a chunk reads, and a tile to spare past the
	// last (a block's last tile may run over it).
	nk := (capacity + 2*64 - 1) / 64 * 64
	half := 2 * at.KVHeads * nk * fd
	p, err := be.reuse(&be.kvHalf, 2*half)
	if err != nil {
		return nil, err
	}
	kh, vt := p, p.Offset(uint64(half))
	s.add(fmt.Sprintf("kv_half_d%d", fd), [3]uint32{uint32(nk / 32), uint32(at.KVHeads), 1}, [3]uint32{256, 1, 1}, uint32(4*32*(fd+1)),
		k.ptr, v.ptr, call.ptr, be.errRec, kh, vt, int32(rows), int32(at.KVHeads), int32(at.HeadDim), int32(capacity), int32(at.Window), ring, int32(nk))
	pb := fk.rows() / (at.Heads / at.KVHeads)
	grid, hx := [3]uint32{uint32((rows + pb - 1) / pb), uint32(at.KVHeads), 1}, int32(0)
	if be.flashHeadsFirst(at.Window) {
		grid, hx = [3]uint32{grid[1], grid[0], 1}, 1
	}
	s.add(fk.name, grid, [3]uint32{uint32(32 * fk.warps), 1, 1}, uint32(fk.shared()),
		q.ptr, kh, vt, call.ptr, be.errRec, y.ptr, gp, sp, int32(rows), int32(at.Heads), int32(at.KVHeads), int32(at.HeadDim),
		int32(capacity), int32(at.Window), ring, at.Scale, int32(nk), hx)
	return s, nil
}

// aligned16 reports whether every pointer is 16-byte aligned.
func aligned16(ps ...cu.DevicePtr) bool {
	for _, p := range ps {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

// attnParts allocates the partial results of split attention for parts
// (row, head, chunk) triples of d dimensions: each one's running maximum m
// and sum l, then its d sums, 16-byte aligned for the kernels' vector
// loads and stores.
func (be *Backend) attnParts(parts, d int) (m, l, acc cu.DevicePtr, err error) {
	mlBytes := (8*parts + 15) &^ 15
	m, err = be.scratchAlloc(mlBytes + 4*parts*d)
	if err != nil {
		return 0, 0, 0, err
	}
	return m, m.Offset(uint64(4 * parts)), m.Offset(uint64(mlBytes)), nil
}

// Decode attention in one launch: attn_dec_g1, g2, g4 and g8
// (kernels/attention_dec.cu, their own program) score the key chunks as attn_part does and merge
// them in the same launch, the last block of each group of chunks to finish
// merging the group and the last group merging into the output, each merge
// in a fixed order (bit-identical results on every run).
//
// It takes decode rows from attnDecMinRows. On the H200 at Dory 4B's heads
// (BenchmarkDecodeAttention, µs a layer, attn_part + attn_finish against
// attn_dec) one row was faster in the old form at the shapes a decode
// spends its time in (global pos512 12.03 against 12.69, pos2048 14.72
// against 17.40; window1024 pos2048 12.58 against 14.07, pos8192 12.58
// against 14.04), slower only at global pos8192 (37.56 against 32.74);
// five rows were faster in one launch (global pos2048 50.78 against
// 37.67). Dory 4B decoded 217.5 tok/s with the old form against 207.9
// with attn_dec at every row count (same run). Two rows were still faster
// in the old form (global pos2048 18.32 against 19.35, window1024 pos2048
// 13.11 against 14.52; session 6, the run that measured five at 50.65
// against 37.49), so attn_dec takes three rows and more; three and four
// rows are not measured.

// attnDecMinRows is the fewest decode rows attn_dec takes by default.
const attnDecMinRows = 3

// attnDecMaxDim is the widest head attn_dec takes (ADEC_VL·128 of
// attention_dec.cu).
const attnDecMaxDim = 256

// attnDecShared is the most dynamic shared memory an attn_dec block asks
// for: 48 KiB (the limit without opting in) less 1 KiB for its static
// shared memory.
const attnDecShared = 47 * 1024

// attnDecFlat is the most chunks whose partials one block merges in one
// level when the fan is chosen: more are merged in groups of about √S.
const attnDecFlat = 16

// attnDecMaxSplits is the most key chunks REEL_ATTN_SPLITS may ask for.
const attnDecMaxSplits = 4096

// attnDecTune is how decode attention is computed: by default attn_dec
// from attnDecMinRows rows, attn_part and attn_finish below; old forces
// attn_part and attn_finish (REEL_ATTN_DECODE=old), one attn_dec from one
// row (REEL_ATTN_DECODE=new); and the key chunks (of attn_dec and of
// attn_part alike) and attn_dec's merge fan when not chosen by the shape
// (0: chosen; REEL_ATTN_SPLITS and REEL_ATTN_FAN, for the lead's sweeps).
type attnDecTune struct {
	old, one bool
	// splits is the key chunks of each (row, kv head).
	splits int
	// fan is the chunks merged by one block of a group; at least the
	// chunks: one level (the last chunk merges them all into the output).
	fan int
}

// parseAttnDecode reads REEL_ATTN_DECODE ("": by rows; new: attn_dec
// from one row; old: attn_part and attn_finish), REEL_ATTN_SPLITS and
// REEL_ATTN_FAN (a number; 0 or "": chosen by the shape).
func parseAttnDecode(mode, splits, fan string) (attnDecTune, error) {
	var t attnDecTune
	switch mode {
	case "":
	case "new":
		t.one = true
	case "old":
		t.old = true
	default:
		return t, fmt.Errorf("REEL_ATTN_DECODE=%q: want new or old", mode)
	}
	for _, e := range []struct {
		name, v string
		to      *int
	}{{"REEL_ATTN_SPLITS", splits, &t.splits}, {"REEL_ATTN_FAN", fan, &t.fan}} {
		if e.v == "" {
			continue
		}
		n, err := strconv.Atoi(e.v)
		if err != nil || n < 0 || n > attnDecMaxSplits {
			return t, fmt.Errorf("%s=%q: want a number of chunks from 0 (chosen) to %d", e.name, e.v, attnDecMaxSplits)
		}
		*e.to = n
	}
	return t, nil
}

// attnSplits is the key chunks each of blocks (row, kv head) pairs splits
// a span of keys into, before the kernel's chunk limits: enough to fill
// sms multiprocessors attnBlocksPerSM times, at least attnChunkMin keys a
// chunk; tune's splits (REEL_ATTN_SPLITS, up to the span) when set.
// attn_part and attn_dec split alike.
func attnSplits(blocks, span, sms int, tune attnDecTune) int {
	if tune.splits > 0 {
		return min(tune.splits, span)
	}
	return max(1, min((span+attnChunkMin-1)/attnChunkMin, (attnBlocksPerSM*max(sms, 1)+blocks-1)/blocks))
}

// attnDecPlan is one attn_dec launch's shape.
type attnDecPlan struct {
	kernel string
	// splits is the key chunks of each (row, kv head) (the grid's z),
	// chunk the most keys of one, fan the chunks of a merge group and
	// groups the groups (⌈splits/fan⌉; 1: one level).
	splits, chunk, fan, groups int
	// shared is the block's dynamic shared memory in bytes.
	shared int
}

// planAttnDec plans attn_dec for rows rows of kvh kv heads, g query heads
// each, of d dimensions, over a span of keys (the slot's capacity or the
// window), on sms multiprocessors: ok false where attn_dec does not take
// the shape (attn_part and attn_finish do: fewer than attnDecMinRows rows
// unless tune.one, every shape with tune.old). The chunks are as
// attn_part's: enough blocks to fill the SMs attnBlocksPerSM times, at
// least attnChunkMin keys each, at most attnChunkMax and what shared
// memory holds.
func planAttnDec(rows, kvh, g, d, span, sms int, tune attnDecTune) (p attnDecPlan, ok bool, err error) {
	if tune.old || (rows < attnDecMinRows && !tune.one) || d%4 != 0 || d > attnDecMaxDim || (g != 1 && g != 2 && g != 4 && g != 8) || rows <= 0 || kvh <= 0 || span <= 0 {
		return p, false, nil
	}
	splits := attnSplits(rows*kvh, span, sms, tune)
	chunk := (span + splits - 1) / splits
	chunk = min(chunk, attnChunkMax, (attnDecShared/4-g*d)/g)
	if chunk < 1 {
		return p, false, fmt.Errorf("attention: %d query heads per kv head of %d do not fit in shared memory", g, d)
	}
	splits = (span + chunk - 1) / chunk
	fan := splits
	if tune.fan > 0 {
		fan = min(tune.fan, splits)
	} else if splits > attnDecFlat {
		fan = int(math.Ceil(math.Sqrt(float64(splits))))
	}
	groups := (splits + fan - 1) / fan
	kg := min(attnThreads/(d/4), attnMaxSplit)
	np := max(fan, groups) // the most partials one merge reads
	shared := 4 * max(g*d+g*chunk, kg*g*d, 2*np*g+2*g)
	if shared > attnDecShared {
		return p, false, fmt.Errorf("attention: %d key chunks merged %d at a time need %d bytes of shared memory, over %d", splits, fan, shared, attnDecShared)
	}
	if splits > 65535 {
		return p, false, fmt.Errorf("attention: %d key chunks, over the grid's 65535", splits)
	}
	return attnDecPlan{kernel: fmt.Sprintf("attn_dec_g%d", g), splits: splits, chunk: chunk, fan: fan, groups: groups, shared: shared}, true, nil
}

// attnDecKernelNames are attn_dec's kernels.
var attnDecKernelNames = []string{"attn_dec_g1", "attn_dec_g2", "attn_dec_g4", "attn_dec_g8"}

// attnDecode appends attn_dec of plan p: its partials and counters are
// the node's own scratch, the counters zeroed here (the kernel leaves them
// zero).
func (be *Backend) attnDecode(s *steps, p attnDecPlan, at ops.AttentionAttrs, q, k, v, call, y *Buffer, gp, sp cu.DevicePtr, rows, capacity int, ring int32) (*steps, error) {
	g, d := at.Heads/at.KVHeads, at.HeadDim
	parts := rows * at.KVHeads * (p.splits + p.groups)
	cntBytes := (4*rows*at.KVHeads*(p.groups+1) + 15) &^ 15
	mlBytes := (4*parts*g + 15) &^ 15
	base, err := be.scratchAlloc(cntBytes + 2*mlBytes + 4*parts*g*d)
	if err != nil {
		return nil, err
	}
	if err := be.ctx.Memset(base, 0, uint64(cntBytes)); err != nil {
		return nil, fmt.Errorf("attention: zero the merge counters: %w", err)
	}
	cnt, pm := base, base.Offset(uint64(cntBytes))
	pl, pacc := pm.Offset(uint64(mlBytes)), pm.Offset(uint64(2*mlBytes))
	s.add(p.kernel, [3]uint32{uint32(rows), uint32(at.KVHeads), uint32(p.splits)}, [3]uint32{attnThreads, 1, 1}, uint32(p.shared),
		q.ptr, k.ptr, v.ptr, call.ptr, be.errRec, pm, pl, pacc, cnt, y.ptr, gp, sp, int32(rows), int32(at.Heads), int32(at.KVHeads),
		int32(d), int32(capacity), int32(at.Window), ring, at.Scale, int32(p.chunk), int32(p.fan))
	return s, nil
}
