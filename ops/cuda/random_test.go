package cuda

import (
	"bytes"
	"testing"
	"time"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestLoadRandom: the card makes the CPU reference's bytes (cpu.Random) of
// every synthetic weight of the table: float values, FP8, 8- and 4-bit
// codes and their scales.
func TestLoadRandom(t *testing.T) {
	be := newTestBackend(t, Options{})
	optest.CheckRandom(t, be, func(r ops.Random) ([]byte, error) { return cpu.Random(r, 0) })

	// 4-bit codes in groups of an odd width, or of two rows, are refused.
	for _, b := range []ops.QuantAttrs{{BlockRows: 1, BlockCols: 31}, {BlockRows: 2, BlockCols: 32}} {
		r := ops.Random{Float: graph.BF16, Shape: []int{4, 64}, Codes: graph.U8, Blocks: b, ScaleType: graph.F16, Scale: 1}
		if _, err := be.LoadRandom(r); err == nil {
			t.Errorf("4-bit codes in blocks %v: no error", b)
		}
	}
}

// TestLoadRandomAsBF16: with F32WeightsAsBF16 a large f32 weight (values,
// or FP8 scales) is stored as Load stores it: the reference's f32 rounded
// to bf16.
func TestLoadRandomAsBF16(t *testing.T) {
	be := newTestBackend(t, Options{F32WeightsAsBF16: true})
	for _, r := range []ops.Random{
		{Stream: 3, Scale: 0.1, Float: graph.F32, Shape: []int{2, MinConvertElems}},
		{Stream: 4, Scale: 0.1, Float: graph.BF16, Shape: []int{2, 1024, MinConvertElems / 16}, Codes: graph.F8E4M3,
			Blocks: ops.QuantAttrs{BlockRows: 1, BlockCols: 1}, ScaleType: graph.F32, Scales: true},
	} {
		ref, err := cpu.Random(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		f := make([]float32, r.Len())
		half.DecodeF32(f, ref)
		want := make([]byte, 2*r.Len())
		half.EncodeBF16(want, f)
		buf, err := be.LoadRandom(r)
		if err != nil {
			t.Fatal(err)
		}
		b := buf.(*Buffer)
		if b.store != graph.BF16 || b.dt != graph.F32 {
			t.Fatalf("stored as %s (value %s), want bf16 (f32)", b.store, b.dt)
		}
		got := make([]byte, len(want))
		if err := be.Read(buf, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the card's bf16 differ from the reference's", optest.RandomName(r))
		}
		be.Free(buf)
	}
}

// TestLoadRandomReleased makes the largest weight of the released
// Qwen4-Exp, a layer's stacked expert gate and up projections [512, 1280,
// 2560] (1.7·10⁹ elements), in each format, and logs the time: the
// model's 121 B expert parameters (49 layers of these and the down
// projections, half as large) take about 74 times as long. The first
// 4 MiB of each are checked against the reference's bytes of the
// same elements (a stack of 2 experts).
func TestLoadRandomReleased(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 6 GB on the card")
	}
	be := newTestBackend(t, Options{})
	shape := []int{512, 1280, 2560}
	for _, q := range []struct {
		codes  graph.DType
		blocks ops.QuantAttrs
		scales graph.DType
	}{
		{graph.Invalid, ops.QuantAttrs{}, graph.Invalid},
		{graph.F8E4M3, ops.QuantAttrs{BlockRows: 128, BlockCols: 128}, graph.F32},
		{graph.I8, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}, graph.F16},
		{graph.U8, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}, graph.F16},
	} {
		r := ops.Random{Stream: 11, Scale: 0.034, Float: graph.BF16, Shape: shape, Codes: q.codes, Blocks: q.blocks, ScaleType: q.scales}
		t0 := time.Now()
		buf, err := be.LoadRandom(r)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		bytesMade := r.Len() * r.DType().Size()
		t.Logf("%s: %.2f GB in %.3f s (%.0f GB/s); the model's experts at this rate: %.1f s",
			optest.RandomName(r), float64(bytesMade)/1e9, took.Seconds(), float64(bytesMade)/took.Seconds()/1e9, 73.5*took.Seconds())
		two := r
		two.Shape = []int{2, 1280, 2560}
		ref, err := cpu.Random(two, 0)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, min(4<<20, len(ref))) // q4 codes of two experts are 3.1 MiB
		if err := be.Read(buf, head); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(head, ref[:len(head)]) {
			t.Errorf("%s: the first %d bytes differ from the reference's", optest.RandomName(r), len(head))
		}
		be.Free(buf)
	}
}
