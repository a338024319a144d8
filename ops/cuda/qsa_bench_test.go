package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// qsaShape is one qsa_attention call: rows rows from position pos, heads
// query heads over kvh KV heads of d, blocks of cr keys, keep a selection.
type qsaShape struct {
	name                               string
	rows, pos, heads, kvh, d, cr, keep int
}

// qsaShapes are qwen4-12l's sparse attention over a prompt chunk of 512
// rows at positions 1536 .. 2047 (every complete block fits the selection
// of 512, so a row reads its p + 1 keys: 1537 .. 2048), and one row of
// decode there.
var qsaShapes = []qsaShape{
	{"qwen4_512rows_pos1536", 512, 1536, 24, 2, 256, 4, 512},
	{"qwen4_1row_pos2047", 1, 2047, 24, 2, 256, 4, 512},
	{"qwen4_1row_pos8191", 1, 8191, 24, 2, 256, 4, 512},
}

// qsaSplitSweep are the key chunks BenchmarkQSAAttention tries for decode
// rows (be.qsaSplit: 0 chosen, −1 the unsplit kernel).
var qsaSplitSweep = []int{0, -1, 16, 33, 66, 132, 264}

// BenchmarkQSAAttention measures qsa_attention at qwen4-12l's shapes: the
// time of one launch (for decode rows, the split kernel and its finish at
// each of qsaSplitSweep's chunks), replayed in a CUDA graph, and TFLOP/s
// of its products (4·heads·d a key read), e.g.
// ops_cuda.test -test.run '^$' -test.bench QSAAttention.
func BenchmarkQSAAttention(b *testing.B) {
	be := newTestBackend(b, Options{})
	for _, s := range qsaShapes {
		splits := []int{0}
		if s.rows <= qsaFewRows {
			splits = qsaSplitSweep
		}
		for _, split := range splits {
			name := s.name
			if s.rows <= qsaFewRows {
				name += fmt.Sprintf("/split=%d", split)
			}
			b.Run(name, func(b *testing.B) {
				be.qsaSplit = split
				defer func() { be.qsaSplit = 0 }()
				benchQSA(b, be, s)
			})
		}
	}
}

// benchQSA times one qsa_attention of shape s.
func benchQSA(b *testing.B, be *Backend, s qsaShape) {
	qb, keys := newQSABench(b, be, s)
	defer qb.free()
	st := qb.steps(b, be, false)
	b.ResetTimer()
	per, _ := qb.time(b, be, st, b.N)
	b.StopTimer()
	if err := be.Sync(); err != nil {
		b.Fatal(err)
	}
	tflops := 4 * float64(s.heads*s.d) * float64(keys) / per.Seconds() / 1e12
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
	b.ReportMetric(tflops, "TFLOP/s")
	b.Logf("%s on %s: %v a launch, %.1f TFLOP/s", b.Name(), be.Device(), per, tflops)
}

// newQSABench binds qsa_attention of shape s over slots of pos + rows keys
// (q, k and v small values that do not matter to the time) with the
// selection qsa_select makes there, and gives the keys its rows read.
func newQSABench(tb testing.TB, be *Backend, s qsaShape) (*gemvBench, int) {
	tb.Helper()
	gb := graph.NewBuilder("qsa")
	q := gb.Input("q", graph.F32, s.rows, s.heads*s.d)
	k := gb.State("k", graph.F32, graph.Dyn, s.kvh*s.d)
	v := gb.State("v", graph.F32, graph.Dyn, s.kvh*s.d)
	sel := gb.Input("sel", graph.I32, s.rows, s.keep)
	call := ops.Call(gb)
	at := ops.SparseAttentionAttrs{Heads: s.heads, KVHeads: s.kvh, HeadDim: s.d, Block: s.cr, Scale: float32(1 / math.Sqrt(float64(s.d)))}
	gb.Output(ops.QSAAttention(gb, q, k, v, sel, call, at))
	g, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	qb := &gemvBench{s: gemvShape{name: s.name}, rows: s.rows, g: g, be: be, copies: 1}
	bufs := make([]ops.Buffer, len(g.Values))
	capacity := s.pos + s.rows
	for _, val := range g.Values {
		n := val.Shape.Elems()
		if val.Kind == graph.State {
			n = capacity * val.Shape[1]
		}
		buf, err := be.Alloc(val.DType, n)
		if err != nil {
			tb.Fatal(err)
		}
		qb.owned = append(qb.owned, buf)
		bufs[val.ID] = buf
	}
	qb.inst = [][]ops.Buffer{bufs}
	for _, x := range []*graph.Value{q, k, v} {
		n := bufs[x.ID].(*Buffer).n
		raw := make([]byte, 0, 4*n)
		for i := range n {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(i%13-6)/16))
		}
		if err := be.Write(bufs[x.ID], raw); err != nil {
			tb.Fatal(err)
		}
	}
	keys := 0
	raw := make([]byte, 0, 4*s.rows*s.keep)
	for t := range s.rows {
		p := s.pos + t
		nb := (p + 1) / s.cr
		kept := min(nb, s.keep)
		for i := range s.keep {
			id := -1
			if i < kept {
				id = i + nb - kept // the last blocks where they do not all fit
			}
			raw = binary.LittleEndian.AppendUint32(raw, uint32(int32(id)))
		}
		keys += kept*s.cr + p + 1 - nb*s.cr
	}
	if err := be.Write(bufs[sel.ID], raw); err != nil {
		tb.Fatal(err)
	}
	rec := make([]byte, 4*ops.CallLen)
	binary.LittleEndian.PutUint32(rec[4*ops.CallPos:], uint32(s.pos))
	if err := be.Write(bufs[call.ID], rec); err != nil {
		tb.Fatal(err)
	}
	return qb, keys
}
