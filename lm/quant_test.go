package lm_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/optest"
	"github.com/reel-runtime/reel/weights"
)

// gaussian is a matrix [out, in] of normal numbers of deviation sd stored
// as dt, with its values as stored.
func gaussian(seed uint64, dt graph.DType, out, in int, sd float64) (lm.Tensor, []float64) {
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, out*in)
	for i := range v {
		v[i] = float32(r.NormFloat64() * sd)
	}
	t := lm.F32Tensor(v, out, in)
	if dt == graph.BF16 {
		t = lm.Tensor{DType: graph.BF16, Shape: []int{out, in}, Data: make([]byte, 2*len(v))}
		half.EncodeBF16(t.Data, v)
		half.DecodeBF16(v, t.Data)
	}
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return t, f
}

// refDequant dequantizes codes and scales as optest's reference reads
// them (codes as values, 4-bit codes as bytes), from the op's statement.
func refDequant(t *testing.T, q lm.Quant, codes, scales lm.Tensor, out, in int) []float64 {
	t.Helper()
	c := make([]float64, len(codes.Data))
	for i, b := range codes.Data {
		switch codes.DType {
		case graph.F8E4M3:
			c[i] = float64(half.E4M3ToF32(b))
		case graph.I8:
			c[i] = float64(int8(b))
		default:
			c[i] = float64(b)
		}
	}
	s := make([]float64, scales.Len())
	for i := range s {
		if scales.DType == graph.F32 {
			s[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(scales.Data[4*i:])))
		} else {
			s[i] = float64(half.F16ToF32(binary.LittleEndian.Uint16(scales.Data[2*i:])))
		}
	}
	return optest.RefDequant(codes.DType, c, s, out, in, q.Attrs())
}

// TestQuantizeError: each format's rounding error on normal weights, as
// NMSE against the weights, is within its bound (the error of a
// round-to-nearest grid of the format's step: fp8 about 3 bits of mantissa,
// q8 1/127 and q4 1/8 of a group's largest magnitude), at sizes that are
// not multiples of the blocks; Dequantize agrees with the op's reference
// dequantization; the largest magnitude of a block takes the format's
// extreme code.
func TestQuantizeError(t *testing.T) {
	for _, c := range []struct {
		method string
		dt     graph.DType
		bound  float64
	}{
		{lm.QuantFP8, graph.F32, 1.1e-3}, {lm.QuantQ8, graph.F32, 3.5e-5}, {lm.QuantQ4, graph.F32, 1.2e-2},
		{lm.QuantFP8, graph.BF16, 1.1e-3}, {lm.QuantQ8, graph.BF16, 3.5e-5}, {lm.QuantQ4, graph.BF16, 1.2e-2},
	} {
		q, err := lm.DefaultQuant(c.method)
		require.NoError(t, err)
		const out, in = 130, 300
		w, want := gaussian(1, c.dt, out, in, 0.02)
		codes, scales, err := q.Quantize(w)
		require.NoError(t, err)
		require.Equal(t, q.DType(), codes.DType)
		require.Equal(t, []int{out, ops.QuantCols(q.DType(), in)}, codes.Shape)
		require.Equal(t, q.ScaleDType(), scales.DType)
		got := refDequant(t, q, codes, scales, out, in)
		nmse := optest.NMSE(got, want)
		t.Logf("%s from %s: NMSE %.3g", q, c.dt, nmse)
		require.Less(t, nmse, c.bound, q.String())
		require.Greater(t, nmse, c.bound/20, "%s: suspiciously exact", q)
		deq, err := q.Dequantize(codes, scales, out, in)
		require.NoError(t, err)
		for i, v := range deq {
			require.InDelta(t, got[i], float64(v), 1e-7*math.Abs(got[i])+1e-12, "%s element %d", q, i)
		}
		// Block (0, 0) holds its largest magnitude at the extreme code.
		at, amax := 0, 0.0
		for r := range min(out, q.BlockRows) {
			for k := range min(in, q.BlockCols) {
				if a := math.Abs(want[r*in+k]); a > amax {
					at, amax = r*in+k, a
				}
			}
		}
		switch c.method {
		case lm.QuantFP8:
			require.Equal(t, byte(0x7e), codes.Data[at]&0x7f)
		case lm.QuantQ8:
			require.Equal(t, 127, int(math.Abs(float64(int8(codes.Data[at])))))
		default:
			stride := ops.QuantCols(q.DType(), in)
			require.Equal(t, byte(0), codes.Data[at/in*stride+at%in/2]>>(4*(at%in%2))&15, "the peak is code -8")
		}
	}
}

// TestQuantizeEdges: zero blocks have zero scales and zero codes; a
// non-finite weight and a scale past f16 are errors naming the rows and
// columns; what is not a float matrix is refused.
func TestQuantizeEdges(t *testing.T) {
	q4, _ := lm.DefaultQuant(lm.QuantQ4)
	codes, scales, err := q4.Quantize(lm.F32Tensor(make([]float32, 3*5), 3, 5))
	require.NoError(t, err)
	require.Equal(t, []byte{0x88, 0x88, 0x08, 0x88, 0x88, 0x08, 0x88, 0x88, 0x08}, codes.Data)
	require.Equal(t, make([]byte, 6), scales.Data)
	v := make([]float32, 4*40)
	v[2*40+33] = float32(math.NaN())
	_, _, err = q4.Quantize(lm.F32Tensor(v, 4, 40))
	require.ErrorContains(t, err, "rows 2..2: columns 32..39: the weight NaN")
	v[2*40+33] = 1e9
	_, _, err = q4.Quantize(lm.F32Tensor(v, 4, 40))
	require.ErrorContains(t, err, "past f16's range")
	fp8, _ := lm.DefaultQuant(lm.QuantFP8)
	v[2*40+33] = float32(math.Inf(-1))
	_, _, err = fp8.Quantize(lm.F32Tensor(v, 4, 40))
	require.ErrorContains(t, err, "rows 0..3: columns 0..39: the weight -Inf")
	_, _, err = fp8.Quantize(lm.F32Tensor(v, 160))
	require.ErrorContains(t, err, "want a float matrix")
	_, _, err = lm.Quant{}.Quantize(lm.F32Tensor(v, 4, 40))
	require.ErrorContains(t, err, "not a format")
}

// TestReadQuant: quantization_config as published (FP8) and as Reel
// writes it (q8, q4, Quant.Config) reads back; what is not read is an
// error naming the field.
func TestReadQuant(t *testing.T) {
	read := func(body string) (lm.Quant, error) {
		cfg, err := weights.ParseConfig("config.json", []byte(body))
		require.NoError(t, err)
		return lm.ReadQuant(cfg)
	}
	q, err := read(`{"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}`)
	require.NoError(t, err)
	require.Equal(t, lm.Quant{Method: "fp8", BlockRows: 128, BlockCols: 128}, q)
	q, err = read(`{}`)
	require.NoError(t, err)
	require.Equal(t, lm.Quant{}, q)
	for _, m := range []string{lm.QuantFP8, lm.QuantQ8, lm.QuantQ4} {
		want, err := lm.DefaultQuant(m)
		require.NoError(t, err)
		want.BlockCols *= 2
		if m == lm.QuantFP8 {
			want.BlockRows = 64
		}
		raw, err := jsonObject(map[string]any{"quantization_config": want.Config()})
		require.NoError(t, err)
		got, err := read(raw)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for body, msg := range map[string]string{
		`{"quantization_config": {"quant_method": "awq"}}`:                                  `quantization_config.quant_method: quantization "awq"`,
		`{"quantization_config": {"quant_method": "q4", "bits": 8}}`:                        "quantization_config.bits 8: q4 has 4",
		`{"quantization_config": {"quant_method": "q8", "group_size": 0}}`:                  "group_size",
		`{"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}`:      "weight_block_size [128]",
		`{"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 128]}}`:   "weight_block_size [0 128]",
		`{"quantization_config": {"quant_method": "fp8", "weight_block_size": ["a", 128]}}`: "weight_block_size",
		`{"quantization_config": {"quant_method": 8}}`:                                      "quant_method",
	} {
		_, err := read(body)
		require.ErrorContains(t, err, msg, body)
	}
}

// TestStoredLinear: Linear reads a float matrix with matmul and a stored
// quantized one with quant_matmul and its scales; with QuantizeFloat a
// float one is declared quantized; Matrix refuses a quantized matrix.
func TestStoredLinear(t *testing.T) {
	q4, _ := lm.DefaultQuant(lm.QuantQ4)
	fp8, _ := lm.DefaultQuant(lm.QuantFP8)
	for _, c := range []struct {
		st    lm.Stored
		op    string
		decl  []string // name:dtype[shape] of the declarations
		fails string
	}{
		{lm.Stored{}, "matmul", []string{"w:bf16[300 65]"}, ""},
		{lm.Stored{DType: func(string) graph.DType { return graph.F8E4M3 }, Quant: fp8}, "quant_matmul",
			[]string{"w:f8_e4m3[300 65]", "w_scale_inv:f32[3 1]"}, ""},
		{lm.Stored{DType: func(string) graph.DType { return graph.BF16 }, Quant: q4, QuantizeFloat: true}, "quant_matmul",
			[]string{"w:u8[300 33]", "w_scale:f16[300 3]"}, ""},
		{lm.Stored{DType: func(string) graph.DType { return graph.I8 }, Quant: q4}, "", nil, "w is stored as i8, which the quantization (q4/1x32) does not describe"},
	} {
		b := graph.NewBuilder("t")
		x := b.Input("x", graph.F32, 2, 65)
		b.Output(c.st.Linear(b, x, "w", 300, 65))
		g, err := b.Graph()
		if c.fails != "" {
			require.ErrorContains(t, err, c.fails)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.op, g.Nodes[0].Op)
		decl, err := lm.Declarations(g)
		require.NoError(t, err)
		var got []string
		for _, d := range decl {
			got = append(got, d.Name+":"+d.DType.String()+graph.Shape(d.Shape).String())
		}
		require.Equal(t, c.decl, got)
	}
	b := graph.NewBuilder("t")
	lm.Stored{DType: func(string) graph.DType { return graph.U8 }, Quant: q4}.Matrix(b, "embed", 10, 4)
	_, err := b.Graph()
	require.ErrorContains(t, err, "weight embed is stored quantized (u8), but is read unquantized")
}

func jsonObject(v any) (string, error) {
	raw, err := json.Marshal(v)
	return string(raw), err
}

// TestQuantizeTensors: the matrices a graph built with QuantizeFloat
// declares quantized become the codes and scales Quantize makes of them;
// every other weight (a matrix read whole, a vector) is kept, the input
// is left as it was, and progress counts the float matrices' bytes. A
// matrix whose shape does not give the declared codes, or that does not
// quantize, is an error naming its scope and name.
func TestQuantizeTensors(t *testing.T) {
	q4, _ := lm.DefaultQuant(lm.QuantQ4)
	w, _ := gaussian(3, graph.BF16, 40, 65, 0.02)
	head, _ := gaussian(4, graph.BF16, 10, 40, 0.02)
	ts := lm.Tensors{"w": w, "head": head, "norm": lm.F32Tensor(make([]float32, 65), 65)}
	build := func(ts lm.Tensors) []lm.Declared {
		b := graph.NewBuilder("t")
		x := b.Input("x", graph.F32, 2, 65)
		st := lm.Stored{DType: ts.DType, Quant: q4, QuantizeFloat: true}
		pop := b.Push("layer 0")
		x = ops.RMSNorm(b, x, b.Weight("norm", graph.F32, 65), 65, 1e-6)
		b.Output(ops.MatMul(b, st.Linear(b, x, "w", 40, 65), st.Matrix(b, "head", 10, 40)))
		pop()
		g, err := b.Graph()
		require.NoError(t, err)
		decl, err := lm.Declarations(g)
		require.NoError(t, err)
		return decl
	}
	var reports [][2]int64
	got, err := lm.QuantizeTensors(ts, build(ts), q4, func(done, total int64) { reports = append(reports, [2]int64{done, total}) })
	require.NoError(t, err)
	codes, scales, err := q4.Quantize(w)
	require.NoError(t, err)
	require.Equal(t, lm.Tensors{"w": codes, "w_scale": scales, "head": head, "norm": ts["norm"]}, got)
	require.Equal(t, graph.BF16, ts["w"].DType, "the input is not changed")
	require.Len(t, ts, 3)
	require.Equal(t, [][2]int64{{0, 40 * 65 * 2}, {40 * 65 * 2, 40 * 65 * 2}}, reports)

	// Quantized weights are kept as they are.
	again, err := lm.QuantizeTensors(got, build(got), q4, nil)
	require.NoError(t, err)
	require.Equal(t, got, again)

	bad := lm.Tensors{"w": lm.F32Tensor(make([]float32, 40*64), 40, 64), "head": head, "norm": ts["norm"]}
	_, err = lm.QuantizeTensors(bad, build(ts), q4, nil)
	require.ErrorContains(t, err, "layer 0: tensor w: shape [40 64] does not make codes [40 33] in q4/1x32")
	nan := make([]float32, 40*65)
	nan[70] = float32(math.NaN())
	bad["w"] = lm.F32Tensor(nan, 40, 65)
	_, err = lm.QuantizeTensors(bad, build(ts), q4, nil)
	require.ErrorContains(t, err, "layer 0: tensor w: quantize rows 1..1: columns 0..31")
	_, err = lm.QuantizeTensors(ts, build(ts), lm.Quant{}, nil)
	require.ErrorContains(t, err, "not a format")
}

// TestQuantizeStack: a stack of matrices [E, out, in] (experts) is
// quantized matrix by matrix: its codes and scales are each matrix's, as
// Quantize makes them of the matrix alone, one after the other (so a block
// never spans two experts), and Dequantize reads the stack back; an error
// names the matrix.
func TestQuantizeStack(t *testing.T) {
	const e, out, in = 3, 40, 65
	w, _ := gaussian(5, graph.BF16, e*out, in, 0.02)
	w.Shape = []int{e, out, in}
	for _, method := range []string{lm.QuantFP8, lm.QuantQ8, lm.QuantQ4} {
		q, err := lm.DefaultQuant(method)
		require.NoError(t, err)
		codes, scales, err := q.Quantize(w)
		require.NoError(t, err)
		stride := ops.QuantCols(q.DType(), in)
		sr, sc := (out+q.BlockRows-1)/q.BlockRows, (in+q.BlockCols-1)/q.BlockCols
		require.Equal(t, []int{e, out, stride}, codes.Shape)
		require.Equal(t, []int{e, sr, sc}, scales.Shape)
		deq, err := q.Dequantize(codes, scales, out, in)
		require.NoError(t, err)
		require.Len(t, deq, e*out*in)
		ssz := sr * sc * q.ScaleDType().Size()
		for m := range e {
			one := lm.Tensor{DType: w.DType, Shape: []int{out, in}, Data: w.Data[m*out*in*2 : (m+1)*out*in*2]}
			c1, s1, err := q.Quantize(one)
			require.NoError(t, err)
			require.Equal(t, c1.Data, codes.Data[m*out*stride:(m+1)*out*stride], "%s matrix %d codes", q, m)
			require.Equal(t, s1.Data, scales.Data[m*ssz:(m+1)*ssz], "%s matrix %d scales", q, m)
			d1, err := q.Dequantize(c1, s1, out, in)
			require.NoError(t, err)
			require.Equal(t, d1, deq[m*out*in:(m+1)*out*in], "%s matrix %d dequantized", q, m)
		}
	}
	v := make([]float32, e*out*in)
	v[2*out*in+5*in+3] = float32(math.Inf(1))
	q8, _ := lm.DefaultQuant(lm.QuantQ8)
	_, _, err := q8.Quantize(lm.F32Tensor(v, e, out, in))
	require.ErrorContains(t, err, "quantize matrix 2: rows 5..5: columns 0..31")
	_, _, err = q8.Quantize(lm.F32Tensor(v, 1, e, out, in))
	require.ErrorContains(t, err, "want a float matrix, or a stack of them")
}

// TestStoredExperts: Experts reads float experts with expert_matmul and
// quantized ones (stored so, or declared so with QuantizeFloat) with
// quant_expert_matmul and one table of scales per expert.
func TestStoredExperts(t *testing.T) {
	q4, _ := lm.DefaultQuant(lm.QuantQ4)
	fp8, _ := lm.DefaultQuant(lm.QuantFP8)
	for _, c := range []struct {
		st   lm.Stored
		op   string
		decl []string
	}{
		{lm.Stored{}, "expert_matmul", []string{"w:bf16[4 300 65]"}},
		{lm.Stored{DType: func(string) graph.DType { return graph.F8E4M3 }, Quant: fp8}, "quant_expert_matmul",
			[]string{"w:f8_e4m3[4 300 65]", "w_scale_inv:f32[4 3 1]"}},
		{lm.Stored{DType: func(string) graph.DType { return graph.BF16 }, Quant: q4, QuantizeFloat: true}, "quant_expert_matmul",
			[]string{"w:u8[4 300 33]", "w_scale:f16[4 300 3]"}},
	} {
		b := graph.NewBuilder("t")
		x := b.Input("x", graph.F32, 2, 65)
		ids := b.Input("ids", graph.I32, 2, 3)
		y := c.st.Experts(b, x, ids, "w", 4, 300, 65)
		b.Output(y)
		g, err := b.Graph()
		require.NoError(t, err)
		require.Equal(t, c.op, g.Nodes[0].Op)
		require.Equal(t, graph.Shape{2, 3, 300}, y.Shape)
		decl, err := lm.Declarations(g)
		require.NoError(t, err)
		var got []string
		for _, d := range decl {
			got = append(got, d.Name+":"+d.DType.String()+graph.Shape(d.Shape).String())
		}
		require.Equal(t, c.decl, got)
	}
	b := graph.NewBuilder("t")
	lm.Stored{DType: func(string) graph.DType { return graph.I8 }, Quant: q4}.Experts(b, b.Input("x", graph.F32, 1, 8),
		b.Input("ids", graph.I32, 1, 1), "w", 2, 4, 8)
	_, err := b.Graph()
	require.ErrorContains(t, err, "w is stored as i8, which the quantization (q4/1x32) does not describe")
}

// TestLoadWeightsQuantizeMade: quantizing at load, a stack of experts the
// checkpoint stores one by one (LoadOptions.Make stacks them) is quantized
// as a whole stack is, and the tensors it was made of count as read; a
// stack that cannot be made is named by Make's error.
func TestLoadWeightsQuantizeMade(t *testing.T) {
	const e, out, in = 3, 8, 40
	stack, _ := gaussian(9, graph.BF16, e*out, in, 0.02)
	stack.Shape = []int{e, out, in}
	dir := t.TempDir()
	var parts []weights.NamedTensor
	for m := range e {
		parts = append(parts, weights.NamedTensor{Name: "experts." + string(rune('0'+m)), DType: graph.BF16, Shape: []int{out, in},
			Data: stack.Data[m*out*in*2 : (m+1)*out*in*2]})
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, weights.SingleFile), parts))
	ck, err := weights.Open(dir)
	require.NoError(t, err)
	defer ck.Close()
	q8, _ := lm.DefaultQuant(lm.QuantQ8)
	b := graph.NewBuilder("t")
	st := lm.Stored{DType: func(string) graph.DType { return graph.BF16 }, Quant: q8, QuantizeFloat: true}
	pop := b.Push("layer 0")
	b.Output(st.Experts(b, b.Input("x", graph.F32, 1, in), b.Input("ids", graph.I32, 1, 2), "experts", e, out, in))
	pop()
	g, err := b.Graph()
	require.NoError(t, err)
	decl, err := lm.Declarations(g)
	require.NoError(t, err)
	makeStack := func(n int) func(lm.Declared, *weights.Checkpoint) (lm.Tensor, []string, bool, error) {
		return func(d lm.Declared, ck *weights.Checkpoint) (lm.Tensor, []string, bool, error) {
			if d.Name != "experts" {
				return lm.Tensor{}, nil, false, nil
			}
			t := lm.Tensor{DType: graph.BF16, Shape: []int{n, out, in}}
			var reads []string
			for m := range n {
				name := "experts." + string(rune('0'+m))
				data, err := ck.Bytes(name)
				if err != nil {
					return lm.Tensor{}, nil, false, fmt.Errorf("tensor %s: %w", name, err)
				}
				t.Data = append(t.Data, data...)
				reads = append(reads, name)
			}
			return t, reads, true, nil
		}
	}
	ts, err := lm.LoadWeights(ck, decl, lm.LoadOptions{Make: makeStack(e), Quant: q8})
	require.NoError(t, err)
	codes, scales, err := q8.Quantize(stack)
	require.NoError(t, err)
	require.Equal(t, lm.Tensors{"experts": codes, "experts_scale": scales}, ts)
	_, err = lm.LoadWeights(ck, decl, lm.LoadOptions{Make: makeStack(e + 1), Quant: q8})
	require.ErrorContains(t, err, "layer 0: tensor experts.3")
}

// TestQuantizeTo: a --quant of the format the weights have, or none, asks
// for nothing; one of another format when they are stored in a float type
// gives its default blocks; weights stored quantized otherwise, and a
// format that is not one, are errors naming the flag.
func TestQuantizeTo(t *testing.T) {
	fp8, err := lm.DefaultQuant(lm.QuantFP8)
	require.NoError(t, err)
	for _, c := range []struct {
		have  lm.Quant
		quant string
	}{{lm.Quant{}, ""}, {fp8, ""}, {fp8, lm.QuantFP8}} {
		q, ok, err := lm.QuantizeTo(c.have, c.quant, "checkpoint")
		require.NoError(t, err)
		require.False(t, ok, "%s to %q", c.have, c.quant)
		require.Equal(t, c.have, q)
	}
	q, ok, err := lm.QuantizeTo(lm.Quant{}, lm.QuantQ4, "checkpoint")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, lm.Quant{Method: lm.QuantQ4, BlockRows: 1, BlockCols: 32}, q)
	_, _, err = lm.QuantizeTo(fp8, lm.QuantQ4, "model")
	require.EqualError(t, err, "--quant q4: the model is stored quantized in fp8")
	_, _, err = lm.QuantizeTo(lm.Quant{}, "q3", "model")
	require.EqualError(t, err, `--quant: quantization "q3": want fp8, q8 or q4`)
}

// TestReadStored: a config's quantization_config read with a --quant: a
// checkpoint stored quantized is read as it is, one in a float type asked
// to be quantized at load gets the format and QuantizeFloat (OnLoad's
// format); a format other than the checkpoint's is an error naming the
// file and the flag.
func TestReadStored(t *testing.T) {
	read := func(body, quant string) (lm.Stored, error) {
		cfg, err := weights.ParseConfig("config.json", []byte(body))
		require.NoError(t, err)
		return lm.ReadStored(cfg, quant)
	}
	fp8, _ := lm.DefaultQuant(lm.QuantFP8)
	q4, _ := lm.DefaultQuant(lm.QuantQ4)
	stored := `{"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}`
	for _, c := range []struct {
		body, quant string
		want        lm.Stored
	}{
		{`{}`, "", lm.Stored{}},
		{`{}`, lm.QuantQ4, lm.Stored{Quant: q4, QuantizeFloat: true}},
		{stored, "", lm.Stored{Quant: fp8}},
		{stored, lm.QuantFP8, lm.Stored{Quant: fp8}},
	} {
		st, err := read(c.body, c.quant)
		require.NoError(t, err)
		require.Equal(t, c.want, st, "%s with %q", c.body, c.quant)
		want := lm.Quant{}
		if c.want.QuantizeFloat {
			want = c.want.Quant
		}
		require.Equal(t, want, st.OnLoad())
	}
	_, err := read(stored, lm.QuantQ4)
	require.EqualError(t, err, "config.json: --quant q4: the checkpoint is stored quantized in fp8")
	_, err = read(`{"quantization_config": {"quant_method": "awq"}}`, "")
	require.ErrorContains(t, err, "quantization_config.quant_method")
}

// TestLoadedQuantize: a model's weights quantized as QuantizeTensors makes
// them, in a Loaded of the format that spends the one it came from (a
// --quant of the format it has, or none, does nothing; another is an
// error); Stored describes each; weights of shapes only give the codes'
// shapes, and none give none.
func TestLoadedQuantize(t *testing.T) {
	q4, _ := lm.DefaultQuant(lm.QuantQ4)
	w, _ := gaussian(3, graph.BF16, 40, 65, 0.02)
	declare := func(st lm.Stored) ([]lm.Declared, error) {
		b := graph.NewBuilder("t")
		b.Output(st.Linear(b, b.Input("x", graph.F32, 1, 65), "w", 40, 65))
		g, err := b.Graph()
		if err != nil {
			return nil, err
		}
		return lm.Declarations(g)
	}
	l := lm.Loaded{Tensors: lm.Tensors{"w": w}}
	require.Equal(t, graph.BF16, l.Stored().DTypeOf("w"))
	same, ok, err := l.Quantize("", declare, nil)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, lm.Loaded{}, same)
	got, ok, err := l.Quantize(lm.QuantQ4, declare, nil)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, lm.Loaded{}, l, "spent")
	decl, err := declare(lm.Stored{DType: lm.Tensors{"w": w}.DType, Quant: q4, QuantizeFloat: true})
	require.NoError(t, err)
	want, err := lm.QuantizeTensors(lm.Tensors{"w": w}, decl, q4, nil)
	require.NoError(t, err)
	require.Equal(t, lm.Loaded{Tensors: want, Quant: q4}, got)
	st := got.Stored()
	require.Equal(t, graph.U8, st.DTypeOf("w"))
	require.Equal(t, q4, st.Quant)
	_, _, err = got.Quantize(lm.QuantQ8, declare, nil)
	require.EqualError(t, err, "--quant q8: the model is stored quantized in q4")
	require.Equal(t, 40*65, got.Parameters(declare), "the matrix's elements, not its codes' and scales'")
	plain := lm.Loaded{Tensors: lm.Tensors{"w": w}}
	require.Equal(t, 40*65, plain.Parameters(nil), "unquantized: the tensors'")

	shapes := lm.Loaded{Tensors: lm.ShapesOf([]lm.Declared{{Name: "w", DType: graph.BF16, Shape: []int{40, 65}}})}
	require.Equal(t, lm.Tensors{"w": {DType: graph.BF16, Shape: []int{40, 65}}}, shapes.Tensors)
	got, ok, err = shapes.Quantize(lm.QuantQ4, declare, nil)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, lm.ShapesOf(decl), got.Tensors)
	none := lm.Loaded{}
	require.Equal(t, lm.Stored{QuantizeFloat: true}, none.Stored(), "no weights: bf16 matrices")
	got, ok, err = none.Quantize(lm.QuantQ4, declare, nil)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, lm.Loaded{Quant: q4}, got)
	require.Equal(t, lm.Stored{Quant: q4, QuantizeFloat: true}, got.Stored())
}
