package cuda

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Binders of QSA sparse attention (ops/sparseattn.go), whose kernels are in
// kernels/sparseattn.cu: qsa_block_keys (two launches: the block keys, then
// the raw key slot), qsa_select (qsa_scores then qsa_topk, per group of
// rows), qsa_attention (one block per row and query head for few rows, one
// per row and KV head for many) and gate_merge.

// qsaBinders are the binders of the QSA ops, by op name.
var qsaBinders = map[string]binder{
	"qsa_block_keys": bindQSABlockKeys,
	"qsa_select":     bindQSASelect,
	"qsa_attention":  bindQSAAttention,
	"gate_merge":     bindGateMerge,
}

// qsaKernels are the kernels of kernels/sparseattn.cu the binders launch.
var qsaKernels = []string{
	"qsa_block_keys", "qsa_block_keys_slot", "qsa_scores", "qsa_topk", "qsa_attention", "qsa_attention_rows_v4",
	"qsa_attention_rows_v1", "qsa_attention_split_v4", "qsa_attention_split_v1", "qsa_gate_merge",
}

// qsaKernelErr words the error codes of kernels/sparseattn.cu (60..69); nil
// for any other code.
func qsaKernelErr(w [errRecWords]int32) error {
	switch w[0] {
	case 60:
		return fmt.Errorf("qsa_block_keys: raw key position %d past the slot's capacity %d", w[1], w[2])
	case 61:
		return fmt.Errorf("qsa_block_keys: block %d past the block keys' capacity %d", w[1], w[2])
	case 62:
		return fmt.Errorf("qsa_block_keys: raw key ring of %d rows cannot hold the %d earlier keys of block %d", w[1], w[2], w[3])
	case 63:
		return fmt.Errorf("qsa_select: row %d at position %d sees %d blocks, past the block keys' capacity %d", w[1], w[2], w[3], w[4])
	case 64:
		return fmt.Errorf("qsa_select: row %d: indexer score of block %d is NaN", w[1], w[2])
	case 65:
		return fmt.Errorf("qsa_attention: position %d past the slots' capacity %d", w[1], w[2])
	case 66:
		return fmt.Errorf("qsa_attention: row %d at position %d: selection entry %d (block %d) is not ascending block ids below %d followed by -1",
			w[1], w[2], w[3], w[4], w[5])
	}
	return nil
}

// qsaSharedMax is the most dynamic shared memory (bytes) a QSA kernel asks
// for: the default limit of 48 KiB less room for the kernels' static shared
// memory.
const qsaSharedMax = 46 * 1024

// qsaScoreScratch is the most scratch (bytes) qsa_select's scores take: rows
// are scored and selected in groups that fit it.
const qsaScoreScratch = 64 << 20

// qsaScorePerCTA is QSA_SC_PER_CTA of sparseattn.cu: the blocks one
// qsa_scores block scores.
const qsaScorePerCTA = 64

// qsaTopKThreads is qsa_topk's block size.
const qsaTopKThreads = 512

// qsaFewRows is the most rows qsa_attention serves with one block per row
// and query head (the kernel decode records, kept for its numerics); more
// rows take qsa_attention_rows, one block per row and KV head, where the
// shape fits it.
const qsaFewRows = 8

// qsa_attention_rows' block size, keys a tile and most query heads a thread
// accumulates (QSA_RT, QSA_TK and QSA_RA of sparseattn.cu).
const (
	qsaRowsThreads = 256
	qsaRowsTile    = 16
	qsaRowsHeads   = 4
)

// qsaRowsSharedMax is the most dynamic shared memory (bytes) a
// qsa_attention_rows launch takes; loadKernels raises the kernels' limit to
// it.
const qsaRowsSharedMax = 96 * 1024

// qsaRowsKernels are the qsa_attention_rows kernels and their split forms
// (qsa_attention_split): K and V a float4 at a time, and a float at a time.
var qsaRowsKernels = []string{"qsa_attention_rows_v4", "qsa_attention_rows_v1", "qsa_attention_split_v4", "qsa_attention_split_v1"}

// qsaSplitMinKeys is the fewest keys a chunk of qsa_attention_split aims
// at (two tiles, so that a block's next tile loads while it computes one);
// a row of fewer keys leaves the last chunks empty.
const qsaSplitMinKeys = 2 * qsaRowsTile

// qsaSplitMax is the most chunks qsa_attention_split takes (attn_finish
// holds two floats a chunk in shared memory).
const qsaSplitMax = 1024

// qsaSplits is the key chunks qsa_attention_split takes for rows rows of
// kvh KV heads reading at most maxKeys keys on a card of sms
// multiprocessors: enough blocks for one per multiprocessor (attnBlocksPerSM
// where chunks stay at least qsaSplitMinKeys), forced (n > 0) or turned
// off (n < 0: 0 chunks, the unsplit kernels) by force (be.qsaSplit,
// REEL_QSA_SPLIT).
func qsaSplits(rows, kvh, maxKeys, sms, force int) int {
	switch {
	case force < 0:
		return 0
	case force > 0:
		return min(force, qsaSplitMax)
	}
	blocks := rows * kvh
	want := max(1, (attnBlocksPerSM*sms+blocks-1)/blocks)
	return max(1, min(want, (maxKeys+qsaSplitMinKeys-1)/qsaSplitMinKeys, qsaSplitMax))
}

// qsaRowsShared is qsa_attention_rows' dynamic shared memory (bytes) for
// groups of g query heads of d and selections of keep blocks, laid out as
// qsa_rows_body lays it out: the softmax sums (g doubles), the selection,
// the query heads, two stages of a K and a V tile, the tile's weights and
// the rescales and maxima (g floats each), each part rounded up to 16 bytes.
func qsaRowsShared(g, d, keep int) int {
	r4 := func(n int) int { return (n + 3) &^ 3 }
	return 4 * (r4(2*g) + r4(keep) + r4(g*d) + 4*qsaRowsTile*d + g*qsaRowsTile + r4(g) + g)
}

// qsaRowsKernel picks the qsa_attention_rows kernel for groups of g query
// heads of d and selections of keep blocks (vec: d%4 == 0 and the buffers
// 16-byte aligned) and gives its shared memory, or "" where the shape does
// not fit it: more columns (d, or d/4 with vec) than threads, more than
// qsaRowsHeads heads a thread, or shared memory past qsaRowsSharedMax.
func qsaRowsKernel(g, d, keep int, vec bool) (name string, shared int) {
	name, cols := qsaRowsKernels[1], d
	if vec {
		name, cols = qsaRowsKernels[0], d/4
	}
	if cols > qsaRowsThreads {
		return "", 0
	}
	per := qsaRowsThreads / cols
	if (g+per-1)/per > qsaRowsHeads {
		return "", 0
	}
	if shared = qsaRowsShared(g, d, keep); shared > qsaRowsSharedMax {
		return "", 0
	}
	return name, shared
}

// parseQSASplit reads REEL_QSA_SPLIT: "" (0: chosen by the shape), off
// (−1) or a positive number of chunks.
func parseQSASplit(v string) (int, error) {
	switch v {
	case "":
		return 0, nil
	case "off":
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not off or a positive number of chunks", v)
	}
	return n, nil
}

// qsaFitsI32 checks that counts the kernels take as int fit in one.
func qsaFitsI32(names []string, vals ...int) error {
	for i, v := range vals {
		if v < 0 || v > math.MaxInt32 {
			return fmt.Errorf("%s of %d does not fit the kernels' 32-bit counts", names[i], v)
		}
	}
	return nil
}

// bindQSABlockKeys binds qsa_block_keys(kraw, w, slot, keys, call): the
// block keys of the blocks the call completes (qsa_block_keys, which reads
// the slot's earlier raw keys), then the call's raw keys into the slot
// (qsa_block_keys_slot). Both check the call and report the same errors.
func bindQSABlockKeys(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.BlockKeyAttrs](n)
	if err != nil {
		return nil, err
	}
	kraw, w, slot, keys, call := in[0], in[1], in[2], in[3], in[4]
	if err := f32All([]string{"kraw", "slot", "keys"}, []*Buffer{kraw, slot, keys}); err != nil {
		return nil, err
	}
	wt, err := wtype(w)
	if err != nil {
		return nil, fmt.Errorf("w: %w", err)
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	d, cr, rope := n.Inputs[0].Shape.Last(), at.Block, at.Rope
	if d <= 0 || cr <= 0 {
		return nil, fmt.Errorf("qsa_block_keys: block %d over keys of %d", cr, d)
	}
	if err := rope.Check(); err != nil {
		return nil, fmt.Errorf("qsa_block_keys: %w", err)
	}
	if rope.HeadDim != d {
		return nil, fmt.Errorf("qsa_block_keys: rope head_dim %d is not the key width %d", rope.HeadDim, d)
	}
	if w.n != d {
		return nil, fmt.Errorf("w has %d elements, want %d", w.n, d)
	}
	if kraw.n%d != 0 || slot.n%d != 0 || keys.n%d != 0 {
		return nil, fmt.Errorf("kraw of %d, slot of %d and keys of %d elements are not rows of %d", kraw.n, slot.n, keys.n, d)
	}
	rows, slotCap, keyCap := kraw.n/d, slot.n/d, keys.n/d
	if err := qsaFitsI32([]string{"slot rows", "block key rows"}, slotCap, keyCap); err != nil {
		return nil, err
	}
	if at.Ring && slotCap == 0 {
		return nil, fmt.Errorf("qsa_block_keys: raw key ring of no rows")
	}
	if 4*d > qsaSharedMax {
		return nil, fmt.Errorf("qsa_block_keys: keys of %d do not fit in shared memory (at most %d)", d, qsaSharedMax/4)
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	freq, m, err := be.uploadRope(rope)
	if err != nil {
		return nil, err
	}
	ring := int32(0)
	if at.Ring {
		ring = 1
	}
	threads := threadsFor(d, 256)
	// a call of rows rows completes at most ⌊(cr − 1 + rows)/cr⌋ blocks
	s.add("qsa_block_keys", [3]uint32{uint32((rows + cr - 1) / cr), 1, 1}, [3]uint32{threads, 1, 1}, uint32(4*d),
		kraw.ptr, w.ptr, wt, slot.ptr, keys.ptr, call.ptr, be.errRec, freq, m, int32(rows), int32(d), int32(rope.Rotary), int32(cr),
		at.Eps, int32(slotCap), int32(keyCap), ring)
	s.add("qsa_block_keys_slot", [3]uint32{uint32(rows), 1, 1}, [3]uint32{threads, 1, 1}, 0,
		kraw.ptr, slot.ptr, call.ptr, be.errRec, int32(rows), int32(d), int32(cr), int32(slotCap), int32(keyCap), ring)
	return s, nil
}

// bindQSASelect binds qsa_select(qi, keys, call): for each group of rows
// whose scores fit qsaScoreScratch, qsa_scores writes the block scores of
// the group's rows and qsa_topk their selections.
func bindQSASelect(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.SelectAttrs](n)
	if err != nil {
		return nil, err
	}
	qi, keys, call, sel := in[0], in[1], in[2], out[0]
	if err := f32All([]string{"qi", "keys"}, []*Buffer{qi, keys}); err != nil {
		return nil, err
	}
	if sel.dt != graph.I32 {
		return nil, fmt.Errorf("output is a %s buffer, want i32", sel.dt)
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	width := n.Inputs[0].Shape.Last()
	if at.Heads <= 0 || width <= 0 || width%at.Heads != 0 || at.Block <= 0 || at.Keep <= 0 {
		return nil, fmt.Errorf("qsa_select: %d heads, block %d, keep %d over rows of %d", at.Heads, at.Block, at.Keep, width)
	}
	d := width / at.Heads
	if qi.n%width != 0 || keys.n%d != 0 {
		return nil, fmt.Errorf("qi of %d and keys of %d elements are not rows of %d and %d", qi.n, keys.n, width, d)
	}
	rows, keyCap := qi.n/width, keys.n/d
	if sel.n != rows*at.Keep {
		return nil, fmt.Errorf("output has %d elements, want %d", sel.n, rows*at.Keep)
	}
	if err := qsaFitsI32([]string{"block key rows", "output elements"}, keyCap, sel.n); err != nil {
		return nil, err
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	group := rows
	if keyCap > 0 {
		group = max(1, min(rows, qsaScoreScratch/(4*keyCap)))
	}
	group = min(group, 65535)
	sc, err := be.scratchAlloc(4 * group * keyCap)
	if err != nil {
		return nil, err
	}
	chunks := max(1, (keyCap+qsaScorePerCTA-1)/qsaScorePerCTA)
	for r0 := 0; r0 < rows; r0 += group {
		g := min(group, rows-r0)
		s.add("qsa_scores", [3]uint32{uint32(chunks), uint32(g), 1}, [3]uint32{256, 1, 1}, 0,
			qi.ptr, keys.ptr, sc, call.ptr, be.errRec, int32(rows), int32(r0), int32(at.Heads), int32(d), int32(at.Block),
			int32(at.Keep), int32(keyCap))
		s.add("qsa_topk", [3]uint32{uint32(g), 1, 1}, [3]uint32{qsaTopKThreads, 1, 1}, 0,
			sc, sel.ptr, call.ptr, be.errRec, int32(rows), int32(r0), int32(at.Block), int32(at.Keep), int32(keyCap))
	}
	return s, nil
}

// bindQSAAttention binds qsa_attention(q, k, v, sel, call): where the shape
// fits, for more than qsaFewRows rows qsa_attention_rows (one block per
// row and KV head, streaming the keys through shared memory for the group's
// query heads at once), and for fewer (decode) qsa_attention_split, the
// same over (row, KV head, key chunk) blocks, whose partials attn_finish
// merges (REEL_QSA_SPLIT=off takes qsa_attention instead, a number forces
// the chunks); else qsa_attention, one block per (row, query head), its
// selection, query head and scores in shared memory (the scores in
// scratch when the most keys a row reads do not fit).
func bindQSAAttention(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.SparseAttentionAttrs](n)
	if err != nil {
		return nil, err
	}
	q, k, v, sel, call, y := in[0], in[1], in[2], in[3], in[4], out[0]
	if err := f32All([]string{"q", "k", "v", "output"}, []*Buffer{q, k, v, y}); err != nil {
		return nil, err
	}
	if sel.dt != graph.I32 {
		return nil, fmt.Errorf("sel is a %s buffer, want i32", sel.dt)
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	d, cr := at.HeadDim, at.Block
	if at.Heads <= 0 || at.KVHeads <= 0 || at.Heads%at.KVHeads != 0 || d <= 0 || cr <= 0 {
		return nil, fmt.Errorf("qsa_attention: %d heads over %d kv heads of %d, block %d", at.Heads, at.KVHeads, d, cr)
	}
	qw, kw := at.Heads*d, at.KVHeads*d
	if q.n%qw != 0 || y.n != q.n || k.n%kw != 0 || v.n != k.n {
		return nil, fmt.Errorf("qsa_attention: q of %d, output of %d, k of %d, v of %d elements do not fit %d query and %d kv heads of %d",
			q.n, y.n, k.n, v.n, at.Heads, at.KVHeads, d)
	}
	rows, capacity := q.n/qw, k.n/kw
	keep := n.Inputs[3].Shape.Last()
	if keep <= 0 || sel.n != rows*keep {
		return nil, fmt.Errorf("sel has %d elements, want %d rows of %d", sel.n, rows, keep)
	}
	// the most keys a row reads: keep blocks and the trailing cr − 1
	maxKeys := keep*cr + cr - 1
	if err := qsaFitsI32([]string{"slot rows", "keys per row"}, capacity, maxKeys); err != nil {
		return nil, err
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	vec := d%4 == 0 && aligned16(q.ptr, k.ptr, v.ptr, y.ptr)
	if name, shared := qsaRowsKernel(at.Heads/at.KVHeads, d, keep, vec); name != "" {
		args := []any{q.ptr, k.ptr, v.ptr, sel.ptr, call.ptr, be.errRec, y.ptr, int32(rows), int32(at.Heads), int32(at.KVHeads), int32(d),
			int32(cr), int32(keep), int32(capacity), at.Scale}
		if rows > qsaFewRows {
			s.add(name, [3]uint32{uint32(rows), uint32(at.KVHeads), 1}, [3]uint32{qsaRowsThreads, 1, 1}, uint32(shared), args...)
			return s, nil
		}
		if splits := qsaSplits(rows, at.KVHeads, maxKeys, be.kernels.sms, be.qsaSplit); splits > 0 {
			pm, pl, pacc, err := be.attnParts(rows*at.Heads*splits, d)
			if err != nil {
				return nil, err
			}
			s.add(strings.Replace(name, "_rows_", "_split_", 1), [3]uint32{uint32(rows), uint32(at.KVHeads), uint32(splits)},
				[3]uint32{qsaRowsThreads, 1, 1}, uint32(shared), append(args, pm, pl, pacc)...)
			addAttnFinish(s, pm, pl, pacc, y, call, rows, at.Heads, d, splits, 0, 0, vec)
			return s, nil
		}
	}
	shared := 4 * (keep + d)
	if shared > qsaSharedMax {
		return nil, fmt.Errorf("qsa_attention: a selection of %d and heads of %d do not fit in shared memory", keep, d)
	}
	var gsc cu.DevicePtr
	if shared+4*maxKeys <= qsaSharedMax {
		shared += 4 * maxKeys
	} else if gsc, err = be.scratchAlloc(4 * rows * at.Heads * maxKeys); err != nil {
		return nil, err
	}
	threads := uint32(128)
	if d > 128 {
		threads = 256
	}
	s.add("qsa_attention", [3]uint32{uint32(rows), uint32(at.Heads), 1}, [3]uint32{threads, 1, 1}, uint32(shared),
		q.ptr, k.ptr, v.ptr, sel.ptr, call.ptr, be.errRec, y.ptr, gsc, int32(rows), int32(at.Heads), int32(at.KVHeads), int32(d),
		int32(cr), int32(keep), int32(capacity), at.Scale, int32(maxKeys))
	return s, nil
}

// bindGateMerge binds gate_merge(y, g) = y ⊙ sigmoid(g), elementwise (the
// output may be y's buffer).
func bindGateMerge(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	y, g, o := in[0], in[1], out[0]
	if err := f32All([]string{"y", "g", "output"}, []*Buffer{y, g, o}); err != nil {
		return nil, err
	}
	if g.n != y.n || o.n != y.n {
		return nil, fmt.Errorf("gate_merge: y of %d, g of %d, output of %d elements", y.n, g.n, o.n)
	}
	s := be.newSteps()
	if y.n == 0 {
		return s, nil
	}
	gr, b := grid1(int64(y.n))
	s.add("qsa_gate_merge", gr, b, 0, y.ptr, g.ptr, o.ptr, int64(y.n))
	return s, nil
}
