package weights_test

import (
	"fmt"
	"os"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/weights"
)

// ExampleWriteCheckpoint writes three tensors as a checkpoint folder
// sharded past 16 bytes of data, and opens it again.
func ExampleWriteCheckpoint() {
	dir, err := os.MkdirTemp("", "ckpt")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ts := []weights.NamedTensor{
		{Name: "a", DType: graph.F32, Shape: []int{2, 2}, Data: weights.EncodeF32([]float32{1, 2, 3, 4})},
		{Name: "b", DType: graph.F16, Shape: []int{4}, Data: weights.EncodeF16([]float32{1, 2, 3, 4})},
		{Name: "c", DType: graph.U8, Shape: []int{3}, Data: []byte{7, 8, 9}},
	}
	files, err := weights.WriteCheckpoint(dir, ts, weights.WriteOptions{ShardBytes: 16})
	if err != nil {
		panic(err)
	}
	fmt.Println(files)
	ck, err := weights.Open(dir)
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	v, err := ck.Float32("b")
	if err != nil {
		panic(err)
	}
	fmt.Println(ck.Names(), v)
	// Output:
	// [model-00001-of-00002.safetensors model-00002-of-00002.safetensors model.safetensors.index.json]
	// [a b c] [1 2 3 4]
}
