package lm_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/weights"
)

// TestExpertStacks: a stack the checkpoint stores per expert is named by
// its experts' tensors (Make stacks them, Stored is expert 0's first,
// From lists those present); one it stores whole, or a weight that is no
// stack, is its own; Name maps the checkpoint's names.
func TestExpertStacks(t *testing.T) {
	dir := t.TempDir()
	row := func(name string, dt graph.DType, v float32) weights.NamedTensor {
		x := []float32{v, v + 1, v + 2, v + 3}
		data := weights.EncodeF32(x)
		if dt == graph.BF16 {
			data = weights.EncodeBF16(x)
		}
		return weights.NamedTensor{Name: name, DType: dt, Shape: []int{1, width}, Data: data}
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, weights.SingleFile), []weights.NamedTensor{
		row("m.l0.experts.0.gate", graph.BF16, 0), row("m.l0.experts.0.up", graph.BF16, 10),
		row("m.l0.experts.1.gate", graph.BF16, 20), row("m.l0.experts.1.up", graph.BF16, 30),
		{Name: "m.l0.experts.down", DType: graph.F32, Shape: []int{2, width, 1}, Data: make([]byte, 8*width)},
	}))
	ck, err := weights.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	x := lm.ExpertStacks{Checkpoint: ck, Dir: "experts.", Parts: map[string][]string{"experts.gate_up": {"gate", "up"}, "experts.down": {"down"}},
		Name: func(n string) string { // the graph's "l0." is the checkpoint's "m.l0."
			if ck.Has("m." + n) {
				return "m." + n
			}
			return ""
		}}

	names, ok := x.Expert("l0.experts.gate_up", 1)
	require.True(t, ok)
	require.Equal(t, []string{"m.l0.experts.1.gate", "m.l0.experts.1.up"}, names)
	names, ok = x.Expert("l1.experts.gate_up", 0)
	require.True(t, ok)
	require.Equal(t, []string{"l1.experts.0.gate", "l1.experts.0.up"}, names, "missing: named as they would be")
	_, ok = x.Expert("l0.experts.down", 0)
	require.False(t, ok, "stored whole")
	_, ok = x.Expert("l0.norm", 0)
	require.False(t, ok, "no stack")

	require.Equal(t, "m.l0.experts.0.gate", x.Stored("l0.experts.gate_up"))
	require.Equal(t, "m.l0.experts.down", x.Stored("l0.experts.down"))
	require.Equal(t, "", x.Stored("l0.norm"))
	require.Equal(t, []string{"m.l0.experts.0.gate", "m.l0.experts.0.up", "m.l0.experts.1.gate", "m.l0.experts.1.up"},
		x.From("l0.experts.gate_up", 2))
	require.Nil(t, x.From("l0.experts.down", 2))

	d := lm.Declared{Name: "l0.experts.gate_up", DType: graph.BF16, Shape: []int{2, 2, width}}
	st, reads, ok, err := x.Make(d, ck)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, x.From(d.Name, 2), reads)
	var want []float32
	for _, v := range []float32{0, 10, 20, 30} {
		want = append(want, v, v+1, v+2, v+3)
	}
	require.Equal(t, lm.Tensor{DType: graph.BF16, Shape: d.Shape, Data: weights.EncodeBF16(want)}, st)
	_, _, ok, err = x.Make(lm.Declared{Name: "l0.experts.down", DType: graph.F32, Shape: []int{2, width, 1}}, ck)
	require.NoError(t, err)
	require.False(t, ok, "read as it is")
	_, _, ok, err = x.Make(lm.Declared{Name: "l0.experts.gate_up", DType: graph.BF16, Shape: []int{3, 2, width}}, ck)
	require.False(t, ok)
	require.EqualError(t, err, "tensor l0.experts.2.gate: missing from the checkpoint")
}
