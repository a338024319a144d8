package weights

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
)

// TestWriteCheckpoint: tensors that fit in one shard are model.safetensors;
// past the shard size they are shards of at most that many bytes (one
// tensor larger than it alone in its own), in the order given, with an
// index whose weight_map names each tensor's shard and whose total_size
// is every tensor's bytes; Open reads the tensors back either way.
func TestWriteCheckpoint(t *testing.T) {
	ts := []NamedTensor{
		{Name: "a", DType: graph.F32, Shape: []int{3}, Data: EncodeF32([]float32{1, 2, 3})}, // 12 bytes
		{Name: "b", DType: graph.U8, Shape: []int{2, 5}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{Name: "c", DType: graph.F16, Shape: []int{20}, Data: EncodeF16(make([]float32, 20))}, // 40 bytes
		{Name: "d", DType: graph.I8, Shape: []int{4}, Data: []byte{1, 2, 3, 4}},
	}
	readBack := func(dir string) {
		t.Helper()
		ck, err := Open(dir)
		require.NoError(t, err)
		defer ck.Close()
		require.Equal(t, []string{"a", "b", "c", "d"}, ck.Names())
		for _, want := range ts {
			info, err := ck.Info(want.Name)
			require.NoError(t, err)
			require.Equal(t, want.DType, info.DType)
			require.Equal(t, want.Shape, info.Shape)
			data, err := ck.Bytes(want.Name)
			require.NoError(t, err)
			require.Equal(t, want.Data, data)
		}
	}
	for _, shard := range []int64{0, 66, 1000} {
		dir := t.TempDir()
		var wrote []int
		files, err := WriteCheckpoint(dir, ts, WriteOptions{ShardBytes: shard, Wrote: func(n int) error { wrote = append(wrote, n); return nil }})
		require.NoError(t, err)
		require.Equal(t, []string{SingleFile}, files)
		require.ElementsMatch(t, []int{12, 10, 40, 4}, wrote)
		readBack(dir)
	}

	dir := t.TempDir()
	files, err := WriteCheckpoint(dir, ts, WriteOptions{ShardBytes: 22})
	require.NoError(t, err)
	require.Equal(t, []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", IndexFile}, files)
	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	require.NoError(t, err)
	var idx struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	require.NoError(t, json.Unmarshal(raw, &idx))
	require.Equal(t, map[string]int64{"total_size": 66}, idx.Metadata)
	require.Equal(t, map[string]string{"a": files[0], "b": files[0], "c": files[1], "d": files[2]}, idx.WeightMap)
	readBack(dir)
}

// TestWriteCheckpointBad: a name given twice, even across shards, is
// refused before anything is written; an error from Wrote stops the
// writing, removes the file it was writing and comes back.
func TestWriteCheckpointBad(t *testing.T) {
	ts := []NamedTensor{
		{Name: "a", DType: graph.U8, Shape: []int{8}, Data: make([]byte, 8)},
		{Name: "b", DType: graph.U8, Shape: []int{8}, Data: make([]byte, 8)},
		{Name: "a", DType: graph.U8, Shape: []int{8}, Data: make([]byte, 8)},
	}
	dir := t.TempDir()
	_, err := WriteCheckpoint(dir, ts, WriteOptions{ShardBytes: 8})
	require.ErrorContains(t, err, `tensor "a": name appears twice`)
	ents, _ := os.ReadDir(dir)
	require.Empty(t, ents)

	stop := errors.New("stop")
	n := 0
	files, err := WriteCheckpoint(dir, ts[:2], WriteOptions{ShardBytes: 8, Wrote: func(int) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	}})
	require.ErrorIs(t, err, stop)
	require.Equal(t, []string{"model-00001-of-00002.safetensors"}, files, "the shards written before the error")
	ents, _ = os.ReadDir(dir)
	require.Len(t, ents, 1, "the shard being written is removed")
}
