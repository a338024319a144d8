package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
	"github.com/reel-runtime/reel/ops/optest"
)

func TestParseAttnDecode(t *testing.T) {
	for _, c := range []struct {
		mode, splits, fan string
		want              attnDecTune
		err               string
	}{
		{"", "", "", attnDecTune{}, ""},
		{"new", "", "", attnDecTune{one: true}, ""},
		{"old", "", "", attnDecTune{old: true}, ""},
		{"", "66", "9", attnDecTune{splits: 66, fan: 9}, ""},
		{"", "0", "4096", attnDecTune{fan: 4096}, ""},
		{"fast", "", "", attnDecTune{}, "REEL_ATTN_DECODE"},
		{"", "-1", "", attnDecTune{}, "REEL_ATTN_SPLITS"},
		{"", "", "x", attnDecTune{}, "REEL_ATTN_FAN"},
		{"", "4097", "", attnDecTune{}, "REEL_ATTN_SPLITS"},
	} {
		got, err := parseAttnDecode(c.mode, c.splits, c.fan)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseAttnDecode(%q, %q, %q) = %v, want an error naming %s", c.mode, c.splits, c.fan, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseAttnDecode(%q, %q, %q) = %+v, %v, want %+v", c.mode, c.splits, c.fan, got, err, c.want)
		}
	}
}

// TestPlanAttnDec checks attn_dec's launch shapes: the kernel for each
// group, chunks that cover the span and fill the SMs, merges that fit
// shared memory, and the shapes it leaves to attn_part (one row by
// default).
func TestPlanAttnDec(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		rows, kvh, g, d, span int
		tune                  attnDecTune
		kernel                string
		splits, fan, groups   int
	}{
		// Dory 4B (one row forced: REEL_ATTN_DECODE=new): a global
		// layer's slot of 4096, a window of 1024, a window of 8 rows, a
		// short slot; two rows forced, three by default
		{1, 4, 4, 256, 4096, attnDecTune{one: true}, "attn_dec_g4", 66, 9, 8},
		{1, 4, 4, 256, 1024, attnDecTune{one: true}, "attn_dec_g4", 64, 8, 8},
		{8, 4, 4, 256, 4096, attnDecTune{}, "attn_dec_g4", 9, 9, 1},
		{2, 4, 4, 256, 4096, attnDecTune{one: true}, "attn_dec_g4", 33, 6, 6},
		{1, 4, 4, 256, 100, attnDecTune{one: true}, "attn_dec_g4", 7, 7, 1},
		{1, 2, 8, 256, 4096, attnDecTune{one: true}, "attn_dec_g8", 128, 12, 11},
		{3, 8, 1, 128, 2048, attnDecTune{}, "attn_dec_g1", 11, 11, 1},
		{1, 1, 2, 4, 1, attnDecTune{one: true}, "attn_dec_g2", 1, 1, 1},
		// tuned: chunks, a fan, one level
		{1, 4, 4, 256, 4096, attnDecTune{one: true, splits: 33}, "attn_dec_g4", 33, 6, 6},
		{1, 4, 4, 256, 4096, attnDecTune{one: true, splits: 132, fan: 4}, "attn_dec_g4", 128, 4, 32},
		{1, 4, 4, 256, 4096, attnDecTune{one: true, fan: 4096}, "attn_dec_g4", 66, 66, 1},
		{1, 4, 4, 256, 10, attnDecTune{one: true, splits: 300}, "attn_dec_g4", 10, 10, 1},
		{1, 4, 4, 256, 50, attnDecTune{one: true, splits: 300, fan: 4}, "attn_dec_g4", 50, 4, 13},
		// a prompt chunk in f32: long chunks, capped by shared memory
		{512, 4, 4, 256, 4096, attnDecTune{}, "attn_dec_g4", 4, 4, 1},
		// not attn_dec's: one and two rows by default, groups of 3 and 16, heads
		// of 6 and 260, old
		{1, 4, 4, 256, 4096, attnDecTune{}, "", 0, 0, 0},
		{1, 4, 4, 256, 1024, attnDecTune{splits: 33}, "", 0, 0, 0},
		{2, 4, 4, 256, 4096, attnDecTune{}, "", 0, 0, 0},
		{2, 4, 3, 256, 4096, attnDecTune{}, "", 0, 0, 0},
		{2, 1, 16, 64, 4096, attnDecTune{one: true}, "", 0, 0, 0},
		{2, 4, 4, 6, 4096, attnDecTune{}, "", 0, 0, 0},
		{2, 4, 4, 260, 4096, attnDecTune{}, "", 0, 0, 0},
		{2, 4, 4, 256, 4096, attnDecTune{old: true}, "", 0, 0, 0},
		{1, 4, 4, 256, 4096, attnDecTune{one: true, old: true}, "", 0, 0, 0},
	} {
		name := fmt.Sprintf("rows=%d/kvh=%d/g=%d/d=%d/span=%d/%+v", c.rows, c.kvh, c.g, c.d, c.span, c.tune)
		p, ok, err := planAttnDec(c.rows, c.kvh, c.g, c.d, c.span, sms, c.tune)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if c.kernel == "" {
			if ok {
				t.Errorf("%s: planned %+v, want attn_part's", name, p)
			}
			continue
		}
		if !ok || p.kernel != c.kernel || p.splits != c.splits || p.fan != c.fan || p.groups != c.groups {
			t.Errorf("%s: %+v (ok %v), want %s of %d chunks, fan %d, %d groups", name, p, ok, c.kernel, c.splits, c.fan, c.groups)
			continue
		}
		// The chunks cover the span; the shared memory holds the
		// queries and scores, the value sum's parts and a merge.
		if p.chunk*p.splits < c.span || p.chunk > attnChunkMax || (p.splits+p.fan-1)/p.fan != p.groups {
			t.Errorf("%s: %d chunks of %d keys for a span of %d, fan %d, %d groups", name, p.splits, p.chunk, c.span, p.fan, p.groups)
		}
		kg := min(attnThreads/(c.d/4), attnMaxSplit)
		np := max(p.fan, p.groups)
		for _, need := range []int{c.g*c.d + c.g*p.chunk, kg * c.g * c.d, 2*np*c.g + 2*c.g} {
			if 4*need > p.shared {
				t.Errorf("%s: %d bytes of shared memory, %d needed", name, p.shared, 4*need)
			}
		}
		if p.shared > attnDecShared {
			t.Errorf("%s: %d bytes of shared memory, over %d", name, p.shared, attnDecShared)
		}
	}
	// A merge too wide for shared memory is an error, not a launch.
	if _, _, err := planAttnDec(1, 1, 8, 256, 8192, sms, attnDecTune{one: true, splits: 4096, fan: 4096}); err == nil || !strings.Contains(err.Error(), "shared memory") {
		t.Errorf("4096 chunks merged at once: %v, want an error about shared memory", err)
	}
}

// attnDecTunes are the decode attention forms TestDecodeAttentionTunes
// runs the op table's attention cases through.
var attnDecTunes = []struct {
	name string
	tune attnDecTune
}{
	{"old", attnDecTune{old: true}},
	{"old_splits3", attnDecTune{old: true, splits: 3}},
	{"old_splits1", attnDecTune{old: true, splits: 1}},
	{"new", attnDecTune{one: true}},
	{"flat", attnDecTune{one: true, fan: attnDecMaxSplits}},
	{"fan2", attnDecTune{one: true, fan: 2}},
	{"splits3", attnDecTune{one: true, splits: 3}},
	{"splits300_fan16", attnDecTune{one: true, splits: 300, fan: 16}},
	{"splits1", attnDecTune{one: true, splits: 1}},
}

// TestDecodeAttentionTunes runs the op table's attention and
// attention_gate cases of decode rows (fewer than take the flash kernel)
// through each of attnDecTunes (TestOpCases takes the default).
func TestDecodeAttentionTunes(t *testing.T) {
	be := newTestBackend(t, Options{Precision: PrecisionHalf})
	ref := cpu.New(0)
	for _, tu := range attnDecTunes {
		t.Run(tu.name, func(t *testing.T) {
			be.attnDec = tu.tune
			defer func() { be.attnDec = attnDecTune{} }()
			runAttentionCases(t, be, ref, "decode rows", func(c optest.Case) bool { return decodeCaseRows(c) < flashMinRows })
		})
	}
}

// runAttentionCases runs the op table's attention and attention_gate
// cases that keep takes on be, each checked and compared with ref, and
// fails when none is taken (what names them).
func runAttentionCases(t *testing.T, be *Backend, ref ops.Backend, what string, keep func(optest.Case) bool) {
	t.Helper()
	n := 0
	for _, c := range optest.Cases() {
		if !strings.HasPrefix(c.Name, "attention") || !keep(c) {
			continue
		}
		n++
		t.Run(c.Name, func(t *testing.T) {
			optest.Check(t, be, c)
			optest.Compare(t, ref, be, c)
		})
	}
	if n == 0 {
		t.Fatalf("no attention cases in the table (%s)", what)
	}
}

// decodeCaseRows is an attention case's query rows (its name's rows=).
func decodeCaseRows(c optest.Case) int {
	i := strings.Index(c.Name, "/rows=")
	if i < 0 {
		return 0
	}
	var rows int
	fmt.Sscanf(c.Name[i+len("/rows="):], "%d", &rows)
	return rows
}

// TestDecodeAttentionDeterministic binds decode attention at Dory 4B's
// shapes once in each tune and runs it several times, eagerly and
// replayed in a CUDA graph: every run's output is the same bit for bit
// (the merges add in a fixed order, whichever block is last, and each
// launch leaves its counters zero for the next) and within the case's
// tolerance of the reference.
func TestDecodeAttentionDeterministic(t *testing.T) {
	be := newTestBackend(t, Options{})
	for _, name := range []string{
		"attention_gate/linear/q16-kv4-d256/rows=1/pos=2047/cap=2048",
		"attention_gate/ring/q16-kv4-d256/rows=2/pos=5000/cap=1983/window=1024",
		"attention/linear/q16-kv4-d256/rows=1/pos=4095/cap=4096",
		"attention/linear/q16-kv4-d256/rows=1/pos=3/cap=2048",
	} {
		c := findCase(t, name)
		var in [][]float64
		for _, x := range c.Inputs {
			in = append(in, x.Data)
		}
		want := c.Ref(in)[0]
		pos := int(c.Inputs[3].Data[ops.CallPos])
		for _, tu := range append([]struct {
			name string
			tune attnDecTune
		}{{"default", attnDecTune{}}}, attnDecTunes...) {
			be.attnDec = tu.tune
			b := bindCase(t, be, c)
			st := b.steps(t, be)
			be.attnDec = attnDecTune{}
			b.reset(t, be, pos)
			var first []float64
			check := func(what string, i int) {
				got := b.results(t, be)[0]
				if first == nil {
					first = got
					if e := optest.NMSE(got, want); !(e <= c.Tol) {
						t.Errorf("%s %s: NMSE %.3g against the reference", c.Name, tu.name, e)
					}
					return
				}
				for j, x := range got {
					if math.Float64bits(x) != math.Float64bits(first[j]) {
						t.Errorf("%s %s: %s run %d differs from the first at %d: %v against %v", c.Name, tu.name, what, i, j, x, first[j])
						return
					}
				}
			}
			for i := range 3 {
				for _, s := range st {
					if err := s.Run(); err != nil {
						t.Fatal(err)
					}
				}
				check("eager", i)
			}
			rec, err := be.Record(st)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := rec.Replay(); err != nil {
					t.Fatal(err)
				}
				check("replayed", i)
			}
			rec.Close()
		}
	}
}

// decAttnShape is one decode attention_gate at Dory 4B's heads: rows rows
// from position pos over a slot of capacity keys (the session's doubling
// slot for a global layer; for a window of 1024 its ring of window + chunk
// of 512 − 1 + rewind of 448 rows, grown like a slot until it has them).
type decAttnShape struct {
	name                     string
	rows, pos, capacity, win int
}

// decAttnShapes are the shapes BenchmarkDecodeAttention measures.
var decAttnShapes = []decAttnShape{
	{"global_pos512", 1, 512, 1024, 0},
	{"global_pos2048", 1, 2048, 4096, 0},
	{"global_pos8192", 1, 8192, 16384, 0},
	{"window1024_pos512", 1, 512, 1024, 1024},
	{"window1024_pos2048", 1, 2048, 1983, 1024},
	{"window1024_pos8192", 1, 8192, 1983, 1024},
	{"global_pos2048_rows2", 2, 2048, 4096, 0},
	{"window1024_pos2048_rows2", 2, 2048, 1983, 1024},
	{"global_pos2048_rows5", 5, 2048, 4096, 0},
}

// kvBytes is the bytes of keys and values shape s reads.
func (s decAttnShape) kvBytes() float64 {
	keys := 0
	for p := s.pos; p < s.pos+s.rows; p++ {
		k := p + 1
		if s.win > 0 {
			k = min(k, s.win)
		}
		keys += k
	}
	return float64(keys) * doryKVHeads * doryHeadDim * 4 * 2
}

// newDecAttnBench binds attention_gate of shape s with the backend's
// current attnDec, in enough instances (each its own q, k, v, g) that a
// cycle through them reads about 256 MB of keys and values, past the L2
// cache as a token's layers do.
func newDecAttnBench(tb testing.TB, be *Backend, s decAttnShape) *gemvBench {
	tb.Helper()
	gb := graph.NewBuilder("decattn")
	w := doryHeads * doryHeadDim
	q := gb.Input("q", graph.F32, s.rows, w)
	k := gb.State("k", graph.F32, graph.Dyn, doryKVHeads*doryHeadDim)
	v := gb.State("v", graph.F32, graph.Dyn, doryKVHeads*doryHeadDim)
	call := ops.Call(gb)
	g := gb.Input("g", graph.F32, s.rows, w)
	sg := gb.Input("sg", graph.F32, w)
	at := ops.AttentionAttrs{Heads: doryHeads, KVHeads: doryKVHeads, HeadDim: doryHeadDim, Window: s.win, Ring: s.win > 0,
		Scale: float32(1 / math.Sqrt(doryHeadDim))}
	gb.Output(gb.Apply(ops.OpAttentionGate, at, 1, q, k, v, call, g, sg)[0])
	gr, err := gb.Graph()
	if err != nil {
		tb.Fatal(err)
	}
	copies := max(2, min(64, int(math.Ceil(256e6/s.kvBytes()))))
	b := &gemvBench{s: gemvShape{name: s.name}, rows: s.rows, g: gr, be: be, copies: copies}
	b.bytes = s.kvBytes() + float64(4*(3*s.rows*w+w))
	// The values pseudo-random in [-1, 1), so that the maxima move as in
	// a model; every copy holds the same (the time does not depend on
	// which).
	seed := uint32(1)
	data := map[*graph.Value][]byte{}
	for _, x := range []*graph.Value{q, k, v, g, sg} {
		n := x.Shape.Elems()
		if x.Kind == graph.State {
			n = s.capacity * x.Shape[1]
		}
		raw := make([]byte, 0, 4*n)
		for range n {
			seed = seed*1664525 + 1013904223
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(int32(seed))/(1<<31)))
		}
		data[x] = raw
	}
	rec := make([]byte, 4*ops.CallLen)
	binary.LittleEndian.PutUint32(rec[4*ops.CallPos:], uint32(s.pos))
	data[call] = rec
	for range copies {
		bufs := make([]ops.Buffer, len(gr.Values))
		for _, val := range gr.Values {
			n := val.Shape.Elems()
			if val.Kind == graph.State {
				n = s.capacity * val.Shape[1]
			}
			bufs[val.ID] = b.alloc(tb, val.DType, n)
			if raw := data[val]; raw != nil {
				if err := be.Write(bufs[val.ID], raw); err != nil {
					tb.Fatal(err)
				}
			}
		}
		b.inst = append(b.inst, bufs)
	}
	return b
}

// timeDecAttn times shape s with tune tu: one attention_gate, replayed
// in a CUDA graph, and GB/s of its keys and values.
func timeDecAttn(tb testing.TB, be *Backend, s decAttnShape, tu attnDecTune, reps int) (float64, float64) {
	tb.Helper()
	be.attnDec = tu
	defer func() { be.attnDec = attnDecTune{} }()
	ab := newDecAttnBench(tb, be, s)
	defer ab.free()
	per, gbps := ab.time(tb, be, ab.steps(tb, be, false), reps)
	if err := be.Sync(); err != nil {
		tb.Fatal(err)
	}
	return float64(per.Nanoseconds()) / 1e3, gbps
}

// BenchmarkDecodeAttention times decode attention_gate at Dory 4B's
// shapes (decAttnShapes) in the old form (attn_part + attn_finish) and
// the new (attn_dec, one launch; the default from attnDecMinRows rows) in
// one run: µs a layer and GB/s of its keys and values, each shape cycling
// through copies past L2, e.g. ops_cuda.test -test.run '^$' -test.bench
// DecodeAttention.
func BenchmarkDecodeAttention(b *testing.B) {
	be := newTestBackend(b, Options{})
	for _, s := range decAttnShapes {
		for _, form := range []struct {
			name string
			tune attnDecTune
		}{{"old", attnDecTune{old: true}}, {"new", attnDecTune{one: true}}} {
			b.Run(s.name+"/"+form.name, func(b *testing.B) {
				b.ResetTimer()
				us, gbps := timeDecAttn(b, be, s, form.tune, b.N)
				b.StopTimer()
				b.ReportMetric(us, "us/op")
				b.ReportMetric(gbps, "GB/s")
				b.ReportMetric(100*gbps*1e9/copyBound, "%copy")
				b.Logf("%s %s on %s: %.2f µs, %.0f GB/s", s.name, form.name, be.Device(), us, gbps)
			})
		}
	}
}

// TestDecodeAttentionSweep prints the registers and local memory of the
// decode attention kernels, then times shapes of decAttnShapes in the old
// form and attn_dec at several chunks and fans, for choosing
// attnBlocksPerSM and the fan: set REEL_ATTN_SWEEP=1 for every shape, or
// to a part of the names of those to time (e.g. pos2048).
func TestDecodeAttentionSweep(t *testing.T) {
	sweep := os.Getenv("REEL_ATTN_SWEEP")
	if sweep == "" {
		t.Skip("REEL_ATTN_SWEEP is not set")
	}
	be := newTestBackend(t, Options{})
	for _, n := range append([]string{"attn_part_v4", "attn_finish"}, attnDecKernelNames...) {
		f := be.kernels.fn[n]
		if f == nil {
			t.Errorf("kernel %s: %v", n, be.kernels.why(n))
			continue
		}
		regs, _ := f.Attribute(cu.FuncNumRegs)
		local, _ := f.Attribute(cu.FuncLocalSizeBytes)
		fmt.Printf("kernel %-14s %3d registers, %d bytes of local memory\n", n, regs, local)
	}
	tunes := []struct {
		name string
		tune attnDecTune
	}{{"old", attnDecTune{old: true}}, {"new", attnDecTune{one: true}}}
	for _, sp := range []int{33, 66, 132} {
		for _, fan := range []int{0, 8, attnDecMaxSplits} {
			tunes = append(tunes, struct {
				name string
				tune attnDecTune
			}{fmt.Sprintf("splits=%d/fan=%d", sp, fan), attnDecTune{one: true, splits: sp, fan: fan}})
		}
	}
	for _, s := range decAttnShapes {
		if sweep != "1" && !strings.Contains(s.name, sweep) {
			continue
		}
		for _, tu := range tunes {
			span := s.capacity
			if s.win > 0 {
				span = min(s.win, span)
			}
			if _, ok, err := planAttnDec(s.rows, doryKVHeads, doryHeads/doryKVHeads, doryHeadDim, span, be.kernels.sms, tu.tune); err != nil || (!ok && !tu.tune.old) {
				continue // a merge too wide for shared memory
			}
			us, gbps := timeDecAttn(t, be, s, tu.tune, 20)
			fmt.Printf("sweep %-22s %-22s %8.2f µs %6.0f GB/s %5.1f%%\n", s.name, tu.name, us, gbps, 100*gbps*1e9/copyBound)
		}
	}
}

// TestQKVAttentionFold runs the op table's qkv_attention_gate cases with
// the tuning's qkvFold (REEL_QKV_ATTN=1): one row of heads of a multiple
// of 4 dimensions in groups of 1, 2, 4 or 8 takes attn_prep_* (no
// qkv_prep launch), every other case qkv_prep and the attention; each
// within its bound of the float64 reference, the slots included.
func TestQKVAttentionFold(t *testing.T) {
	be := newTestBackend(t, Options{})
	be.mv.qkvFold = true
	n := 0
	for _, c := range optest.Cases() {
		if !strings.HasPrefix(c.Name, "qkv_attention_gate/") {
			continue
		}
		n++
		t.Run(c.Name, func(t *testing.T) {
			optest.Check(t, be, c)
			var names []string // the kernels of one plain run
			be.bound = &names
			_, err := runPlain(be, c)
			be.bound = nil
			if (err != nil) != (c.WantErr != "") {
				t.Fatalf("plain run: %v, want an error %v", err, c.WantErr != "")
			}
			g, err := c.Graph()
			if err != nil {
				t.Fatal(err)
			}
			at, err := ops.NodeAttrs[ops.QKVAttentionAttrs](g.Nodes[0])
			if err != nil {
				t.Fatal(err)
			}
			a := at.Attention
			grp := a.Heads / a.KVHeads
			want := c.Inputs[0].Shape.Rows() == 1 && a.HeadDim%4 == 0 && (grp == 1 || grp == 2 || grp == 4 || grp == 8)
			folded := slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "attn_prep_") })
			if c.WantErr == "" && folded != want {
				t.Errorf("kernels %v: folded %v, want %v", names, folded, want)
			}
			if folded && slices.Contains(names, "qkv_prep") {
				t.Errorf("kernels %v: qkv_prep beside the prep form", names)
			}
		})
	}
	if n == 0 {
		t.Fatal("no qkv_attention_gate cases in the table")
	}
}

// TestAttnSlot needs no device: how the attention kernels read a slot.
func TestAttnSlot(t *testing.T) {
	for _, c := range []struct {
		at             ops.AttentionAttrs
		capacity, rows int
		ring           int32
		span           int
	}{
		{ops.AttentionAttrs{}, 2048, 1, 0, 2048},                         // a linear slot: every key
		{ops.AttentionAttrs{Window: 512}, 2048, 1, 0, 512},               // a window over a linear slot
		{ops.AttentionAttrs{Window: 1024, Ring: true}, 1024, 1, 1, 1024}, // a ring that holds its window
		{ops.AttentionAttrs{Window: 1024, Ring: true}, 1024, 3, 0, 1024}, // too short for three rows: linear
		{ops.AttentionAttrs{Window: 4096, Ring: true}, 1024, 1, 0, 1024}, // a window past the ring
		{ops.AttentionAttrs{}, 0, 1, 0, 1},                               // an empty slot: a span of 1
	} {
		ring, span := attnSlot(c.at, c.capacity, c.rows)
		if ring != c.ring || span != c.span {
			t.Errorf("attnSlot(%+v, %d, %d) = %d, %d; want %d, %d", c.at, c.capacity, c.rows, ring, span, c.ring, c.span)
		}
	}
}
