package weights

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/graph"
)

const (
	doryDir  = "../testdata/dory/dory-tiny-per_loop"
	qwen4Dir = "../testdata/qwen4/qwen4-tiny-small-11"
)

func sum(xs []float32) float64 {
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return s
}

func TestOpenDory(t *testing.T) {
	c, err := Open(doryDir)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, doryDir, c.Dir())

	names := c.Names()
	assert.Len(t, names, 87)
	assert.IsNonDecreasing(t, names)
	s := c.Summary()
	assert.Equal(t, 87, s.Tensors)
	assert.Equal(t, int64(224097), s.Params)
	assert.Equal(t, map[graph.DType]int64{graph.F32: 896388}, s.Bytes)
	assert.Equal(t, "87 tensors, 224097 parameters (f32 896 kB)", s.String())

	info, err := c.Expect("lm_head.weight", 97, 64)
	require.NoError(t, err)
	assert.Equal(t, graph.F32, info.DType)
	assert.Equal(t, filepath.Join(doryDir, "model.safetensors"), info.File)
	_, err = c.Expect("lm_head.weight", -1, 64)
	assert.NoError(t, err)
	_, err = c.Expect("lm_head.weight", 64, 97)
	assert.EqualError(t, err, `checkpoint `+doryDir+`: tensor "lm_head.weight": shape [97 64], want [64 97]`)
	_, err = c.Expect("lm_head.weight", 97)
	assert.ErrorContains(t, err, "want [97]")

	w, err := c.Float32("lm_head.weight")
	require.NoError(t, err)
	require.Len(t, w, 97*64)
	// Values read with Python's struct module from the same file.
	assert.Equal(t, []float32{-0.7550387382507324, -0.9418513774871826, -0.32176244258880615}, w[:3])
	assert.InDelta(t, -60.292845606803894, sum(w), 1e-9)

	d, err := c.Dense("lm_head.weight")
	require.NoError(t, err)
	assert.Equal(t, tensor.Shape{97, 64}, d.Shape())
	assert.Equal(t, tensor.Float32, d.Dtype())
	assert.Equal(t, w, d.Data())

	for _, name := range names {
		info, err := c.Info(name)
		require.NoError(t, err)
		b, err := c.Bytes(name)
		require.NoError(t, err)
		assert.Len(t, b, info.NBytes(), name)
		xs, err := c.Float32(name)
		require.NoError(t, err)
		for _, x := range xs {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("%s holds %v", name, x)
			}
		}
	}

	_, err = c.Info("x")
	assert.EqualError(t, err, `checkpoint `+doryDir+`: no tensor "x"`)
	_, err = c.Bytes("x")
	assert.ErrorContains(t, err, `no tensor "x"`)
	_, err = c.Float32("x")
	assert.ErrorContains(t, err, `no tensor "x"`)
	_, err = c.Dense("x")
	assert.ErrorContains(t, err, `no tensor "x"`)
	_, err = c.Expect("x", 1)
	assert.ErrorContains(t, err, `no tensor "x"`)
	assert.False(t, c.Has("x"))
	assert.True(t, c.Has("lm_head.weight"))

	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	_, err = c.Bytes("lm_head.weight")
	assert.ErrorContains(t, err, "closed")
}

func TestDoryConfig(t *testing.T) {
	cfg, err := ReadConfig(filepath.Join(doryDir, "config.json"))
	require.NoError(t, err)
	g := cfg.Get()
	g.Require("hidden_size", "vocab_size", "hybrid_layer_pattern")
	assert.Equal(t, 64, g.Int("hidden_size", 0))
	assert.Equal(t, 97, g.Int("vocab_size", 0))
	assert.Equal(t, "S-S-*-S-S-*-", g.String("hybrid_layer_pattern", ""))
	assert.Equal(t, 1e7, g.Float("rope_theta", 0))
	assert.Equal(t, []int{2, 1, 2, 1, 1, 1, 2, 1, 2, 1, 1, 1}, g.Ints("rope_profile_layers"))
	assert.True(t, g.Bool("ngpt", false))
	assert.Equal(t, "per_loop", g.String("recurrent_kv_cache_mode", ""))
	assert.Equal(t, 2.0, g.Float("attention_output_gate_logit_scale_init", 2), "null gives the default")
	require.NoError(t, g.Err())
	assert.True(t, cfg.IsNull("attention_output_gate_logit_scale_init"))
	assert.True(t, cfg.Has("attention_output_gate_logit_scale_init"))
}

func TestOpenQwen4(t *testing.T) {
	c, err := Open(qwen4Dir)
	require.NoError(t, err)
	defer c.Close()
	s := c.Summary()
	assert.Equal(t, 384, s.Tensors)
	assert.Equal(t, int64(750427), s.Params)
	assert.Equal(t, map[graph.DType]int64{graph.F32: 3001664, graph.I64: 88}, s.Bytes)

	w, err := c.Float32("lm_head.weight")
	require.NoError(t, err)
	assert.Equal(t, []float32{0.0714566707611084, -0.019211070612072945, 0.0872952789068222}, w[:3])
	assert.InDelta(t, -0.9716828538803384, sum(w), 1e-9)

	const ids = "model.layers.1.ple.ple_embedding.ngram_heads_vocab_sizes"
	d, err := c.Dense(ids)
	require.NoError(t, err)
	assert.Equal(t, tensor.Int64, d.Dtype())
	assert.Equal(t, []int64{101, 103, 107, 109}, d.Data())
	_, err = c.Float32(ids)
	assert.ErrorContains(t, err, "i64, not a floating-point type")
	info, err := c.Expect("model.layers.1.ple.ple_embedding.layer_multipliers", 3)
	require.NoError(t, err)
	assert.Equal(t, graph.I64, info.DType)

	cfg, err := ReadConfig(filepath.Join(qwen4Dir, "config.json"))
	require.NoError(t, err)
	g := cfg.Get()
	assert.Equal(t, 1e7, g.Float("rope_parameters.rope_theta", 0))
	assert.Equal(t, 0.25, g.Float("rope_parameters.partial_rotary_factor", 0))
	assert.Equal(t, 1e-6, g.Float("rms_norm_eps", 0))
	assert.Equal(t, []int{2}, g.Ints("ple_layer_ids"))
	types := g.Strings("layer_types")
	require.NoError(t, g.Err())
	assert.Len(t, types, 8)
	assert.Equal(t, "qwen_sparse_attention", types[3])

	// golden.json is plain JSON the config reader takes too.
	_, err = ReadConfig(filepath.Join(qwen4Dir, "golden.json"))
	assert.NoError(t, err)
}

func TestOpenDoryLastLoop(t *testing.T) {
	c, err := Open("../testdata/dory/dory-tiny-last_loop")
	require.NoError(t, err)
	defer c.Close()
	assert.Len(t, c.Names(), 87)
	cfg, err := ReadConfig("../testdata/dory/dory-tiny-last_loop/config.json")
	require.NoError(t, err)
	mode, err := cfg.String("recurrent_kv_cache_mode", "")
	require.NoError(t, err)
	assert.Equal(t, "last_loop", mode)
}

// writeIndex writes a model.safetensors.index.json mapping names to shards.
func writeIndex(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644))
}

func f32(name string, shape []int, xs ...float32) NamedTensor {
	return NamedTensor{Name: name, DType: graph.F32, Shape: shape, Data: EncodeF32(xs)}
}

func TestOpenSharded(t *testing.T) {
	dir := t.TempDir()
	shard1, shard2 := "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	require.NoError(t, WriteFile(filepath.Join(dir, shard1), []NamedTensor{
		f32("a", []int{2}, 1, 2),
		f32("b", []int{1, 2}, 3, 4),
		{Name: "h", DType: graph.F16, Shape: []int{2}, Data: EncodeF16([]float32{0.5, -1})},
	}))
	require.NoError(t, WriteFile(filepath.Join(dir, shard2), []NamedTensor{
		f32("c", nil, 5),
		{Name: "bf", DType: graph.BF16, Shape: []int{2}, Data: EncodeBF16([]float32{2, -3})},
		{Name: "n", DType: graph.I32, Shape: []int{3}, Data: binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 1), 2), 0xffffffff)},
	}))
	writeIndex(t, dir, map[string]string{"a": shard1, "b": shard1, "h": shard1, "c": shard2, "bf": shard2, "n": shard2})

	c, err := Open(dir)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, []string{"a", "b", "bf", "c", "h", "n"}, c.Names())
	assert.Len(t, c.files, 2, "every shard opened once")
	info, err := c.Info("c")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, shard2), info.File)
	assert.Empty(t, info.Shape)

	for name, want := range map[string][]float32{"a": {1, 2}, "b": {3, 4}, "c": {5}, "h": {0.5, -1}, "bf": {2, -3}} {
		got, err := c.Float32(name)
		require.NoError(t, err)
		assert.Equal(t, want, got, name)
	}
	d, err := c.Dense("c")
	require.NoError(t, err)
	assert.Equal(t, tensor.Shape{1}, d.Shape(), "scalar gives shape (1)")
	d, err = c.Dense("bf")
	require.NoError(t, err)
	assert.Equal(t, []float32{2, -3}, d.Data())
	d, err = c.Dense("n")
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 2, -1}, d.Data())
	_, err = c.Float32("n")
	assert.ErrorContains(t, err, "i32")

	s := c.Summary()
	assert.Equal(t, int64(2+2+2+1+2+3), s.Params)
	assert.Equal(t, map[graph.DType]int64{graph.F32: 20, graph.F16: 4, graph.BF16: 4, graph.I32: 12}, s.Bytes)
}

func TestOpenShardedBad(t *testing.T) {
	t.Run("name missing from shard", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, WriteFile(filepath.Join(dir, "s1.safetensors"), []NamedTensor{f32("a", nil, 1)}))
		require.NoError(t, WriteFile(filepath.Join(dir, "s2.safetensors"), []NamedTensor{f32("b", nil, 1)}))
		writeIndex(t, dir, map[string]string{"a": "s1.safetensors", "b": "s1.safetensors"})
		_, err := Open(dir)
		assert.ErrorContains(t, err, `tensor "b" in shard s1.safetensors, which lacks it`)
	})
	t.Run("missing shard", func(t *testing.T) {
		dir := t.TempDir()
		writeIndex(t, dir, map[string]string{"a": "nope.safetensors"})
		_, err := Open(dir)
		assert.ErrorIs(t, err, os.ErrNotExist)
		assert.ErrorContains(t, err, "nope.safetensors")
	})
	t.Run("shard outside folder", func(t *testing.T) {
		dir := t.TempDir()
		writeIndex(t, dir, map[string]string{"a": "../x.safetensors"})
		_, err := Open(dir)
		assert.ErrorContains(t, err, "not a file inside")
	})
	t.Run("empty weight map", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"metadata":{}}`), 0o644))
		_, err := Open(dir)
		assert.ErrorContains(t, err, "weight_map")
	})
	t.Run("bad index JSON", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":[`), 0o644))
		_, err := Open(dir)
		assert.ErrorContains(t, err, IndexFile)
	})
	t.Run("corrupt shard", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "s1.safetensors"), rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, nil), 0o644))
		writeIndex(t, dir, map[string]string{"a": "s1.safetensors"})
		_, err := Open(dir)
		assert.ErrorContains(t, err, `s1.safetensors: tensor "a": data_offsets [0, 8]`)
	})
}

func TestOpenLooseFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteFile(filepath.Join(dir, "b.safetensors"), []NamedTensor{f32("y", nil, 2)}))
	require.NoError(t, WriteFile(filepath.Join(dir, "a.safetensors"), []NamedTensor{f32("x", nil, 1)}))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644))
	c, err := Open(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"x", "y"}, c.Names())
	require.NoError(t, c.Close())

	// A tensor name in two files is an error naming both.
	require.NoError(t, WriteFile(filepath.Join(dir, "c.safetensors"), []NamedTensor{f32("x", nil, 3)}))
	_, err = Open(dir)
	assert.ErrorContains(t, err, `tensor "x" is in both a.safetensors and c.safetensors`)
}

func TestOpenSingleFilePreferred(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteFile(filepath.Join(dir, SingleFile), []NamedTensor{f32("x", nil, 1)}))
	require.NoError(t, WriteFile(filepath.Join(dir, "other.safetensors"), []NamedTensor{f32("x", nil, 2)}))
	writeIndex(t, dir, map[string]string{"x": "other.safetensors"})
	c, err := Open(dir)
	require.NoError(t, err)
	defer c.Close()
	xs, err := c.Float32("x")
	require.NoError(t, err)
	assert.Equal(t, []float32{1}, xs)
}

func TestOpenBadDir(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = Open(t.TempDir())
	assert.ErrorContains(t, err, "no model.safetensors")
	_, err = Open(filepath.Join(doryDir, "config.json"))
	assert.ErrorContains(t, err, "not a directory")
}

func TestDenseEmpty(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteFile(filepath.Join(dir, SingleFile), []NamedTensor{{Name: "e", DType: graph.F32, Shape: []int{0, 4}}}))
	c, err := Open(dir)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Dense("e")
	assert.ErrorContains(t, err, "no elements")
	xs, err := c.Float32("e")
	require.NoError(t, err)
	assert.Empty(t, xs)
	assert.True(t, strings.HasPrefix(c.Summary().String(), "1 tensors, 0 parameters"))
}

// TestCloseNil: a nil Checkpoint (a model made without a file) closes as
// a closed one does.
func TestCloseNil(t *testing.T) {
	var c *Checkpoint
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
