package ops

import (
	"slices"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
)

// TestUnitUniform: the hash is splitmix64 (Vigna's splitmix64.c): from
// state 0 its outputs are 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4,
// 0x06c45d188009454f, whose top 53 bits over 2⁵³ are the numbers of
// elements 0, 1, 2 of stream 0; a stream is the state it starts from.
func TestUnitUniform(t *testing.T) {
	for i, want := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := UnitUniform(0, uint64(i)); got != float64(want>>11)/(1<<53) {
			t.Errorf("UnitUniform(0, %d) = %v, want %v", i, got, float64(want>>11)/(1<<53))
		}
	}
	// Stream s, element i is splitmix64's output i+1 from state s, which
	// is output i from state s+φ: streams are shifted sequences.
	const phi = 0x9e3779b97f4a7c15
	if UnitUniform(phi, 0) != UnitUniform(0, 1) {
		t.Error("stream φ does not start at element 1 of stream 0")
	}
	for i := range uint64(1000) {
		if u := UnitUniform(7, i); u < 0 || u >= 1 {
			t.Fatalf("UnitUniform(7, %d) = %v, outside [0, 1)", i, u)
		}
	}
}

// TestRandomShapes: what a Random makes (dtype, shape, elements), and the
// descriptions Check refuses, each naming what is wrong.
func TestRandomShapes(t *testing.T) {
	q4 := Random{Float: graph.BF16, Shape: []int{3, 5, 65}, Codes: graph.U8, Blocks: QuantAttrs{BlockRows: 1, BlockCols: 32}, ScaleType: graph.F16}
	if err := q4.Check(); err != nil {
		t.Fatal(err)
	}
	if q4.DType() != graph.U8 || !slices.Equal(q4.MadeShape(), []int{3, 5, 33}) || q4.Len() != 3*5*33 {
		t.Errorf("q4 codes: %s %v %d", q4.DType(), q4.MadeShape(), q4.Len())
	}
	s := q4
	s.Scales = true
	if s.DType() != graph.F16 || !slices.Equal(s.MadeShape(), []int{3, 5, 3}) {
		t.Errorf("q4 scales: %s %v", s.DType(), s.MadeShape())
	}
	fp8 := Random{Float: graph.BF16, Shape: []int{300, 260}, Codes: graph.F8E4M3, Blocks: QuantAttrs{BlockRows: 128, BlockCols: 128}, ScaleType: graph.F32, Scales: true}
	if !slices.Equal(fp8.MadeShape(), []int{3, 3}) || fp8.DType() != graph.F32 {
		t.Errorf("fp8 scales: %s %v", fp8.DType(), fp8.MadeShape())
	}
	v := Random{Float: graph.F16, Shape: []int{4, 6}}
	if v.Quantized() || v.DType() != graph.F16 || v.Len() != 24 {
		t.Errorf("values: %s %d", v.DType(), v.Len())
	}
	for _, c := range []struct {
		r    Random
		want string
	}{
		{Random{Float: graph.I8, Shape: []int{2}}, "want f32, bf16 or f16"},
		{Random{Float: graph.F32, Shape: []int{2, 0}}, "positive sides"},
		{Random{Float: graph.F32, Shape: []int{1 << 30, 1 << 30, 4}}, "at most"},
		{Random{Float: graph.F32}, "no shape"},
		{Random{Float: graph.F32, Shape: []int{4}, Codes: graph.I8, Blocks: QuantAttrs{BlockRows: 1, BlockCols: 2}, ScaleType: graph.F16}, "a matrix or a stack"},
		{Random{Float: graph.F32, Shape: []int{4, 4}, Codes: graph.BF16, Blocks: QuantAttrs{BlockRows: 1, BlockCols: 2}, ScaleType: graph.F16}, "f8_e4m3, i8 or u8"},
		{Random{Float: graph.F32, Shape: []int{4, 4}, Codes: graph.I8, Blocks: QuantAttrs{BlockRows: 0, BlockCols: 2}, ScaleType: graph.F16}, "BlockRows"},
		{Random{Float: graph.F32, Shape: []int{4, 4}, Codes: graph.I8, Blocks: QuantAttrs{BlockRows: 1, BlockCols: 2}, ScaleType: graph.I32}, "scales"},
	} {
		err := c.r.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%+v) = %v, want an error saying %q", c.r, err, c.want)
		}
	}
}

// TestRandomMatrices: a quantized random weight's float tensor as a stack
// of matrices, of a matrix and of a stack.
func TestRandomMatrices(t *testing.T) {
	for _, c := range []struct {
		shape         []int
		mats, out, in int
	}{{[]int{5, 7}, 1, 5, 7}, {[]int{3, 5, 7}, 3, 5, 7}} {
		r := Random{Float: graph.F32, Shape: c.shape, Codes: graph.I8, Blocks: QuantAttrs{BlockRows: 1, BlockCols: 32}, ScaleType: graph.F16}
		if err := r.Check(); err != nil {
			t.Fatal(err)
		}
		if m, o, i := r.Matrices(); m != c.mats || o != c.out || i != c.in {
			t.Errorf("Matrices of %v = %d, %d, %d; want %d, %d, %d", c.shape, m, o, i, c.mats, c.out, c.in)
		}
	}
}
