package cpu

// familyKernels are the kernels of the op families: hyper-connection streams,
// Gated DeltaNet, sparse attention, n-gram embeddings and mixture of experts.
var familyKernels = map[string]kernelFunc{
	"hc_expand": hcExpandKernel,
	"hc_mix":    hcMixKernel,
	"hc_inject": hcInjectKernel,
	// the fused stream ops (ops/fused_hyperconn.go)
	"moe_inject_norm": moeInjectNormKernel,
	"hc_mix_matmul":   hcMixMatMulKernel,
	"reshape":         reshapeKernel,

	"split":         splitKernel,
	"causal_conv":   causalConvKernel,
	"gdn_prep":      gdnPrepKernel,
	"gdn_gates":     gdnGatesKernel,
	"gdn_scan":      gdnScanKernel,
	"gated_rmsnorm": gatedRMSNormKernel,

	"qsa_block_keys": qsaBlockKeysKernel,
	"qsa_select":     qsaSelectKernel,
	"qsa_attention":  qsaAttentionKernel,
	"gate_merge":     gateMergeKernel,

	"ple_hash":    pleHashKernel,
	"ngram_embed": ngramEmbedKernel,
	"ple_gate":    pleGateKernel,

	"moe_route":         moeRouteKernel,
	"expert_matmul":     expertMatMulKernel,
	"silu_glu":          siluGLUKernel,
	"moe_combine":       moeCombineKernel,
	"expert_matmul_glu": expertMatMulGLUKernel,
}
