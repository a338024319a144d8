package cuda

// The Qwen4-Exp ops' binders, kernels and error codes live by group:
// Gated DeltaNet (qwen_gdn.go, codes 20-29), hyper-connection streams and
// their norm (qwen_hc.go, 30-39), mixture of experts (qwen_moe.go, 40-49),
// per-layer n-gram embeddings (qwen_ple.go, 50-59) and QSA sparse attention
// (qwen_qsa.go, 60-69). The tables below join them to the backend's.

// qwenBinders are the groups' binders, added to binders once at start-up.
var qwenBinders = []map[string]binder{gdnBinders, hcBinders, moeBinders, pleBinders, qsaBinders}

// qwenKernelNames are the groups' kernels, loaded with the others.
func qwenKernelNames() []string {
	var out []string
	for _, k := range [][]string{gdnKernels, hcKernels, moeKernels, pleKernels, qsaKernels} {
		out = append(out, k...)
	}
	return out
}

// qwenKernelErrs word the groups' error codes; each gives nil for a code
// that is not its own.
var qwenKernelErrs = []func([errRecWords]int32) error{gdnKernelErr, hcKernelErr, moeKernelErr, pleKernelErr, qsaKernelErr}

func init() {
	for _, m := range qwenBinders {
		for op, b := range m {
			binders[op] = b
		}
	}
}
