package cuda

// The op families' binders, kernels and error codes live by family:
// Gated DeltaNet (deltanet.go, codes 20-29), hyper-connection streams and
// their norm (hyperconn.go, 30-39), mixture of experts (moe.go, 40-49),
// per-layer n-gram embeddings (ngram.go, 50-59), QSA sparse attention
// (sparseattn.go, 60-69), and the products with quantized weights
// (quant.go, no error codes). The tables below join them to the backend's.

// familyBinders are the groups' binders, added to binders once at start-up.
var familyBinders = []map[string]binder{gdnBinders, hcBinders, moeBinders, pleBinders, qsaBinders, quantBinders, quantFusedBinders}

// familyKernelNames are the groups' kernels, loaded with the others.
func familyKernelNames() []string {
	var out []string
	for _, k := range [][]string{gdnKernels, hcKernels, moeKernels, pleKernels, qsaKernels, quantKernels, randomKernels} {
		out = append(out, k...)
	}
	return out
}

// familyKernelErrs word the groups' error codes; each gives nil for a code
// that is not its own.
var familyKernelErrs = []func([errRecWords]int32) error{gdnKernelErr, hcKernelErr, moeKernelErr, pleKernelErr, qsaKernelErr}

func init() {
	for _, m := range familyBinders {
		for op, b := range m {
			binders[op] = b
		}
	}
}
