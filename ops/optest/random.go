package optest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// RandomCases are synthetic weights (ops.Random) of every kind a
// RandomLoader makes: float values in f32, bf16 and f16 of odd lengths and
// past a backend's grid; the codes and the scales of matrices and stacks
// of them in FP8 (128 x 128 blocks as published, partial at the edges, and
// blocks of one row), 8-bit and 4-bit groups (odd widths: a half byte at
// a row's end), scales in f32, f16 and bf16, values rounded from bf16,
// f16 and f32.
func RandomCases() []ops.Random {
	var rs []ops.Random
	for i, shape := range [][]int{{1}, {7}, {3, 33}, {129, 65}, {4, 1 << 17}} {
		for j, dt := range []graph.DType{graph.F32, graph.BF16, graph.F16} {
			rs = append(rs, ops.Random{Stream: uint64(10*i + j), Scale: 0.05, Float: dt, Shape: shape})
		}
	}
	type q struct {
		codes  graph.DType
		blocks ops.QuantAttrs
		scales graph.DType
		float  graph.DType
		shape  []int
	}
	for i, c := range []q{
		{graph.F8E4M3, ops.QuantAttrs{BlockRows: 128, BlockCols: 128}, graph.F32, graph.BF16, []int{300, 260}},
		{graph.F8E4M3, ops.QuantAttrs{BlockRows: 128, BlockCols: 128}, graph.F32, graph.BF16, []int{3, 130, 257}},
		{graph.F8E4M3, ops.QuantAttrs{BlockRows: 1, BlockCols: 64}, graph.F16, graph.F32, []int{33, 100}},
		{graph.F8E4M3, ops.QuantAttrs{BlockRows: 16, BlockCols: 8}, graph.BF16, graph.F16, []int{2, 40, 20}},
		{graph.I8, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}, graph.F16, graph.BF16, []int{65, 129}},
		{graph.I8, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}, graph.F16, graph.BF16, []int{5, 17, 96}},
		{graph.I8, ops.QuantAttrs{BlockRows: 4, BlockCols: 16}, graph.F32, graph.F32, []int{10, 50}},
		{graph.U8, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}, graph.F16, graph.BF16, []int{65, 129}},
		{graph.U8, ops.QuantAttrs{BlockRows: 1, BlockCols: 32}, graph.F16, graph.BF16, []int{3, 40, 64}},
		{graph.U8, ops.QuantAttrs{BlockRows: 1, BlockCols: 2}, graph.F32, graph.F16, []int{7, 9}},
	} {
		for _, scales := range []bool{false, true} {
			rs = append(rs, ops.Random{Stream: uint64(100 + i), Scale: 0.04, Float: c.float, Shape: c.shape,
				Codes: c.codes, Blocks: c.blocks, ScaleType: c.scales, Scales: scales})
		}
	}
	return rs
}

// RandomName names a case for a subtest.
func RandomName(r ops.Random) string {
	what := fmt.Sprintf("%s%v", r.Float, r.Shape)
	if r.Quantized() {
		part := "codes"
		if r.Scales {
			part = r.ScaleType.String() + "_scales"
		}
		what += fmt.Sprintf("_%s_%dx%d_%s", r.Codes, r.Blocks.BlockRows, r.Blocks.BlockCols, part)
	}
	return what
}

// CheckRandom makes each case with be's LoadRandom and compares the bytes
// it reads back with the reference's (cpu.Random, which this package
// cannot import), naming the first byte that differs.
func CheckRandom(t *testing.T, be ops.Backend, ref func(ops.Random) ([]byte, error)) {
	rl, ok := be.(ops.RandomLoader)
	if !ok {
		t.Fatalf("the %s backend makes no random weights", be.Name())
	}
	for _, r := range RandomCases() {
		t.Run(RandomName(r), func(t *testing.T) {
			want, err := ref(r)
			if err != nil {
				t.Fatal(err)
			}
			buf, err := rl.LoadRandom(r)
			if err != nil {
				t.Fatal(err)
			}
			defer be.Free(buf)
			if buf.DType() != r.DType() || buf.Len() != r.Len() {
				t.Fatalf("made %d %s elements, want %d %s", buf.Len(), buf.DType(), r.Len(), r.DType())
			}
			got := make([]byte, len(want))
			if err := be.Read(buf, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("byte %d of %d: %#02x, want %#02x", i, len(want), got[i], want[i])
					}
				}
			}
		})
	}
}
