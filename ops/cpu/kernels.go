package cpu

// kernels is the CPU kernel of every op, by op name; built once, never changed.
var kernels = func() map[string]kernelFunc {
	m := map[string]kernelFunc{}
	for name, k := range commonKernels {
		m[name] = k
	}
	for name, k := range familyKernels {
		m[name] = k
	}
	for name, k := range plannerKernels {
		m[name] = k
	}
	for name, k := range decodeKernels {
		m[name] = k
	}
	for name, k := range quantKernels {
		m[name] = k
	}
	for name, k := range quantFusedKernels {
		m[name] = k
	}
	for name, k := range slerpKernels {
		m[name] = k
	}
	return m
}()

// commonKernels are the kernels of the ops every model uses.
var commonKernels = map[string]kernelFunc{
	"embed":          embedKernel,
	"matmul":         bindMatMul,
	"grouped_matmul": bindMatMul,
	"add":            binaryKernel(opAdd),
	"sub":            binaryKernel(opSub),
	"mul":            binaryKernel(opMul),
	"sigmoid":        sigmoidKernel,
	"silu":           siluKernel,
	"scale":          scaleKernel,
	"l2norm":         normKernel(false),
	"rmsnorm":        normKernel(true),
	"rope":           ropeKernel,
	"kv_write":       kvWriteKernel,
	"attention":      attentionKernel,
	"slice_rows":     sliceRowsKernel,
	"last_row":       lastRowKernel,
	"argmax":         argmaxKernel,
	"slerp":          slerpKernel,
	"mix":            mixKernel,
	"swiglu":         swigluKernel,
	"gated_norm":     gatedNormKernel,
	"norm_rope":      normRopeKernel,
	"store":          storeKernel,
}
