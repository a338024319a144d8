package trace_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/planner"
	"github.com/reel-runtime/reel/trace"
)

// A Recorder instruments the plans of any session through its planner
// options; each run of a plan is a call of the recording.
func ExampleRecorder() {
	m, err := models.Load("../testdata/dory/dory-tiny-per_loop")
	if err != nil {
		panic(err)
	}
	defer m.Close()
	match, _ := trace.Glob("*attn_out", "head / logits")
	rec := &trace.Recorder{Match: match}
	o := models.Options{}
	o.Planner = rec.Planner(planner.DefaultOptions())
	s, err := m.NewSession(o)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	if _, err := s.Forward([]int{3, 10, 17}, 0, lm.WantAll); err != nil {
		panic(err)
	}
	for _, r := range rec.Records()[:3] {
		fmt.Printf("%s %v (%s)\n", r.Name, r.Shape, r.Op)
	}
	fmt.Println(len(rec.Records()), "values,", rec.Calls(), "call")
	// Output:
	// input block / layer 0 attn / attn_out [3 64] (norm_matmul)
	// input block / layer 2 attn / attn_out [3 64] (norm_matmul)
	// loop 0 / layer 4 attn / attn_out [3 64] (norm_matmul)
	// 9 values, 1 call
}

// Diff compares two recordings read from files and names the first value
// past the tolerance.
func ExampleDiff() {
	dir, err := os.MkdirTemp("", "trace")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	a := filepath.Join(dir, "a.safetensors")
	b := filepath.Join(dir, "b.safetensors")
	if err := trace.Write(a, []trace.Record{f32("embed", 0, 0, 2, 1, 2, 3, 4), f32("layer 0 / out", 0, 0, 2, 1, 1, 1, 1)}); err != nil {
		panic(err)
	}
	if err := trace.Write(b, []trace.Record{f32("embed", 0, 0, 2, 1, 2, 3, 4), f32("layer 0 / out", 0, 0, 2, 1, 1, 1, 1.5)}); err != nil {
		panic(err)
	}
	ra, _ := trace.Read(a)
	rb, _ := trace.Read(b)
	rep := trace.Diff(ra, rb, 1e-4, trace.Abs)
	rep.WriteTo(os.Stdout)
	// Output:
	// first divergence: layer 0 / out (op op, max abs 0.5, nmse 0.0625)
	// embed          call 0     op                   max abs 0          nmse 0
	// layer 0 / out  call 0     op                   max abs 0.5        nmse 0.0625  past 0.0001
	// compared 2 values (abs): 1 past 0.0001; 0 names only in the first, 0 only in the second, 0 records not aligned
}
