package cuda

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// binder binds one op: it checks the node's buffers, does the work that does
// not depend on the data (launch shapes, tables, scratch) and returns the
// step that enqueues the op.
type binder func(be *Backend, n *graph.Node, in, out []*Buffer) (*steps, error)

// binders is every op this backend runs, by op name; built at start-up
// (families.go adds the op families'), never changed after.
var binders = map[string]binder{
	"embed":               bindEmbed,
	"matmul":              bindMatMul,
	"grouped_matmul":      bindMatMul,
	"add":                 bindBinary(ewCode("add")),
	"sub":                 bindBinary(ewCode("sub")),
	"mul":                 bindBinary(ewCode("mul")),
	"sigmoid":             bindUnary(ewCode("sigmoid")),
	"silu":                bindUnary(ewCode("silu")),
	"scale":               bindUnary(ewCode("scale")),
	"l2norm":              bindNorm(false),
	"rmsnorm":             bindNorm(true),
	"rope":                bindRope,
	"norm_rope":           bindRope,
	"norm_rope_kv":        bindRope,
	"kv_write":            bindKVWrite,
	"attention":           bindAttention,
	"attention_gate":      bindAttentionGate,
	"qkv_prep":            bindQKVPrep,
	"qkv_attention_gate":  bindQKVAttentionGate,
	"norm_matmul":         bindNormMatMul,
	"slice_rows":          bindSliceRows,
	"last_row":            bindLastRow,
	"argmax":              bindArgmax,
	"store":               bindStore,
	"slerp":               bindRowFuse(rowSlerp),
	"mix":                 bindRowFuse(rowMix),
	"gated_norm":          bindRowFuse(rowGatedNorm),
	"swiglu":              bindSwiGLU,
	"matmul_swiglu":       bindMatMulSwiGLU,
	"swiglu_norm_matmul":  bindSwiGLUNormMatMul,
	"elementwise_chain":   bindChain,
	"slerp_matmul":        bindSlerpMatMul,
	"slerp_matmul_swiglu": bindSlerpMatMulSwiGLU,
}

// HasKernel reports whether the CUDA backend has a kernel for op; it needs
// no driver (reel ops lists it).
func HasKernel(op string) bool {
	_, ok := binders[op]
	return ok
}

// Kernel gives the kernel of an op, or false when this backend has none.
func (be *Backend) Kernel(op string) (ops.Kernel, bool) {
	f, ok := binders[op]
	if !ok {
		return nil, false
	}
	return ops.KernelFunc(func(n *graph.Node, in, out []ops.Buffer) (ops.Step, error) {
		if err := be.check(); err != nil {
			return nil, err
		}
		ib, err := be.buffers("input", in)
		if err != nil {
			return nil, err
		}
		ob, err := be.buffers("output", out)
		if err != nil {
			return nil, err
		}
		if len(ib) != len(n.Inputs) || len(ob) != len(n.Outputs) {
			return nil, fmt.Errorf("%d inputs and %d outputs bound for %d and %d", len(ib), len(ob), len(n.Inputs), len(n.Outputs))
		}
		for i, v := range n.Inputs {
			if err := ops.CheckBinding(v, ib[i]); err != nil {
				return nil, fmt.Errorf("input %d: %w", i, err)
			}
		}
		for i, v := range n.Outputs {
			if err := ops.CheckBinding(v, ob[i]); err != nil {
				return nil, fmt.Errorf("output %d: %w", i, err)
			}
		}
		return f(be, n, ib, ob)
	}), true
}

// Ops lists the ops this backend has kernels for.
func Ops() []string {
	out := make([]string, 0, len(binders))
	for k := range binders {
		out = append(out, k)
	}
	return out
}

func (be *Backend) buffers(what string, bs []ops.Buffer) ([]*Buffer, error) {
	out := make([]*Buffer, len(bs))
	for i, b := range bs {
		cb, err := be.buffer(fmt.Sprintf("%s %d", what, i), b)
		if err != nil {
			return nil, err
		}
		out[i] = cb
	}
	return out, nil
}

// f32 checks that b holds f32 elements as f32 (not a converted weight).
func f32(what string, b *Buffer) error {
	if b.dt != graph.F32 || b.store != graph.F32 {
		return fmt.Errorf("%s is a %s buffer (stored %s), want f32", what, b.dt, b.store)
	}
	return nil
}

func f32All(names []string, bs []*Buffer) error {
	for i, b := range bs {
		if err := f32(names[i], b); err != nil {
			return err
		}
	}
	return nil
}

func (be *Backend) newSteps() *steps { return &steps{be: be} }

// checkCall checks the call record buffer a kernel reads the position and
// rows of a run from.
func checkCall(call *Buffer) error {
	if call.dt != graph.I32 || call.n < ops.CallLen {
		return fmt.Errorf("call record is a %s buffer of %d elements, want i32 of at least %d", call.dt, call.n, ops.CallLen)
	}
	return nil
}

// wtype is the kernels' code of a weight's stored type.
func wtype(b *Buffer) (int32, error) {
	switch b.store {
	case graph.F32:
		return 0, nil
	case graph.BF16:
		return 1, nil
	case graph.F16:
		return 2, nil
	}
	return 0, fmt.Errorf("weight stored as %s: want f32, bf16 or f16", b.store)
}
