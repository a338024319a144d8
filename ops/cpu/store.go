package cpu

import (
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// storeKernel copies its input into the state it writes.
func storeKernel(_ *Backend, _ *graph.Node, in, _ []*Buffer) (ops.Step, error) {
	src, dst := in[0], in[1]
	return ops.StepFunc(func() error {
		copy(dst.Raw, src.Raw)
		return nil
	}), nil
}
