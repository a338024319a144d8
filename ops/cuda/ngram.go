package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Binders of PLE, the hashed n-gram side input of a layer
// (ops/ngram.go; kernels/ngram.cu): ple_hash is one launch over the
// rows that also keeps the token history, ngram_embed one gather over the
// (token, head) pairs from the table's shards, ple_gate one block per row
// and stream.

// pleBinders are the binders of the PLE ops, by op name.
var pleBinders = map[string]binder{
	"ple_hash":    bindPLEHash,
	"ngram_embed": bindNGramEmbed,
	"ple_gate":    bindPLEGate,
}

// pleKernels are the extern "C" kernels of kernels/ngram.cu.
var pleKernels = []string{"ple_hash", "ple_ngram_embed", "ple_gate"}

// pleErrRow is ERR_PLE_ROW of kernels/ngram.cu: a row id outside the
// n-gram table (token, head, id; the table's rows in words 4 and 5).
const pleErrRow = 50

// pleKernelErr words the error record's PLE codes (kernels/ngram.cu), and
// is nil for any other code.
func pleKernelErr(w [errRecWords]int32) error {
	switch w[0] {
	case pleErrRow:
		total := int64(uint32(w[4])) | int64(w[5])<<32
		return fmt.Errorf("ngram_embed: token %d head %d: row %d outside the table of %d rows", w[1], w[2], w[3], total)
	}
	return nil
}

// pleHashThreads is the block size of ple_hash; the n-gram's history of
// ngram − 1 tokens must fit in it (see the kernel).
const pleHashThreads = 256

// bindPLEHash binds ple_hash: the hash constants go to the device as one i64
// table (multipliers, sizes, offsets), the position comes from the call
// record at run time.
func bindPLEHash(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.PLEHashAttrs](n)
	if err != nil {
		return nil, err
	}
	ng, hp := at.NGram, at.HeadsPerNGram
	if ng < 2 || hp <= 0 {
		return nil, fmt.Errorf("ple_hash: ngram size %d must be at least 2 and heads per n-gram %d positive", ng, hp)
	}
	if ng-1 > pleHashThreads {
		return nil, fmt.Errorf("ple_hash: ngram size %d: this backend keeps at most %d tokens of history", ng, pleHashThreads)
	}
	nh := (ng - 1) * hp
	if len(at.Mult) != ng || len(at.Sizes) != nh || len(at.Offsets) != nh {
		return nil, fmt.Errorf("ple_hash: %d multipliers, %d sizes, %d offsets; want %d, %d, %d", len(at.Mult), len(at.Sizes), len(at.Offsets), ng, nh, nh)
	}
	for h, s := range at.Sizes {
		if off := at.Offsets[h]; s <= 0 || off < 0 || off > math.MaxInt32-(s-1) {
			return nil, fmt.Errorf("ple_hash: head %d has table size %d at offset %d: rows must be positive and fit i32", h, s, off)
		}
	}
	ids, hist, call, rows := in[0], in[1], in[2], out[0]
	for _, b := range []struct {
		what string
		buf  *Buffer
	}{{"ids", ids}, {"hist", hist}, {"output", rows}} {
		if b.buf.dt != graph.I32 {
			return nil, fmt.Errorf("ple_hash: %s is a %s buffer, want i32", b.what, b.buf.dt)
		}
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	t := ids.n
	if hist.n != ng-1 || rows.n != t*nh {
		return nil, fmt.Errorf("ple_hash: hist of %d, output of %d elements for %d rows of %d heads (want hist of %d)", hist.n, rows.n, t, nh, ng-1)
	}
	s := be.newSteps()
	if t == 0 {
		return s, nil
	}
	table := make([]byte, 0, 8*(ng+2*nh))
	for _, vs := range [][]int64{at.Mult, at.Sizes, at.Offsets} {
		for _, v := range vs {
			table = binary.LittleEndian.AppendUint64(table, uint64(v))
		}
	}
	consts, err := be.upload(table)
	if err != nil {
		return nil, err
	}
	g := [3]uint32{uint32(min((t+pleHashThreads-1)/pleHashThreads, 65535)), 1, 1}
	s.add("ple_hash", g, [3]uint32{pleHashThreads, 1, 1}, 0,
		ids.ptr, hist.ptr, call.ptr, consts, rows.ptr, be.errRec, int32(t), int32(ng), int32(hp), at.EOS)
	return s, nil
}

// bindNGramEmbed binds ngram_embed: the shards' addresses, first rows and
// weight types go to the device as one i64 table; a row id outside the
// table is reported at run time.
func bindNGramEmbed(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	if len(in) < 2 {
		return nil, fmt.Errorf("ngram_embed takes row ids and at least one table shard, got %d inputs", len(in))
	}
	ids, y := in[0], out[0]
	if ids.dt != graph.I32 {
		return nil, fmt.Errorf("ngram_embed: rows is a %s buffer, want i32", ids.dt)
	}
	if err := f32("output", y); err != nil {
		return nil, err
	}
	rs := n.Inputs[0].Shape
	if len(rs) != 2 || rs[1] <= 0 {
		return nil, fmt.Errorf("ngram_embed: rows %v must be [tokens, heads > 0]", rs)
	}
	nh := rs[1]
	ns := len(in) - 1
	w := n.Inputs[1].Shape.Last()
	var ptrs, starts, wts []byte
	total := int64(0)
	starts = binary.LittleEndian.AppendUint64(starts, 0)
	for i, b := range in[1:] {
		sh := n.Inputs[1+i].Shape
		if len(sh) != 2 || sh[1] != w || w <= 0 {
			return nil, fmt.Errorf("ngram_embed: shard %d %v must be [rows, %d]", i, sh, w)
		}
		if b.n != sh[0]*w {
			return nil, fmt.Errorf("ngram_embed: shard %d has %d elements, want %d rows of %d", i, b.n, sh[0], w)
		}
		wt, err := wtype(b)
		if err != nil {
			return nil, fmt.Errorf("ngram_embed: shard %d: %w", i, err)
		}
		total += int64(sh[0])
		ptrs = binary.LittleEndian.AppendUint64(ptrs, uint64(b.ptr))
		starts = binary.LittleEndian.AppendUint64(starts, uint64(total))
		wts = binary.LittleEndian.AppendUint64(wts, uint64(wt))
	}
	items := ids.n
	if items%nh != 0 || y.n != items*w {
		return nil, fmt.Errorf("ngram_embed: %d row ids in rows of %d heads, output of %d elements, want %d", items, nh, y.n, items*w)
	}
	s := be.newSteps()
	if items == 0 {
		return s, nil
	}
	tab, err := be.upload(append(append(ptrs, starts...), wts...))
	if err != nil {
		return nil, err
	}
	g := [3]uint32{uint32(min(items, 65535)), 1, 1}
	s.add("ple_ngram_embed", g, [3]uint32{threadsFor(w, 256), 1, 1}, 0,
		ids.ptr, tab, int32(ns), y.ptr, int64(items), int32(nh), int32(w), be.errRec)
	return s, nil
}

// bindPLEGate binds ple_gate: one block per (row, stream).
func bindPLEGate(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error) {
	at, err := ops.NodeAttrs[ops.StreamAttrs](n)
	if err != nil {
		return nil, err
	}
	kn, qn, v, y := in[0], in[1], in[2], out[0]
	if err := f32All([]string{"kn", "qn", "v", "output"}, []*Buffer{kn, qn, v, y}); err != nil {
		return nil, err
	}
	c := at.Streams
	width := n.Inputs[0].Shape.Last()
	if c <= 0 || width <= 0 || width%c != 0 {
		return nil, fmt.Errorf("ple_gate: %d streams do not divide rows of %d", c, width)
	}
	h := width / c
	rows := kn.n / width
	if kn.n%width != 0 || qn.n != kn.n || y.n != kn.n || v.n != rows*h {
		return nil, fmt.Errorf("ple_gate: kn of %d, qn of %d, v of %d, output of %d elements do not fit %d streams of %d", kn.n, qn.n, v.n, y.n, c, h)
	}
	s := be.newSteps()
	if rows == 0 {
		return s, nil
	}
	s.add("ple_gate", [3]uint32{uint32(rows * c), 1, 1}, [3]uint32{threadsFor(h, 256), 1, 1}, 0,
		kn.ptr, qn.ptr, v.ptr, y.ptr, int32(c), int32(h))
	return s, nil
}
