// Shared by the attention kernels (attention.cu's decode chunks and
// flash.cu's prompt tiles).

// attn_gate is attention_gate's output gate on element a of row t's head
// h, dimension i: a ⊙ sigmoid(g ⊙ s) as the primitives compute it (a when
// g is null: plain attention).
__device__ __forceinline__ float attn_gate(float a, const float* g, const float* sg, int t, int h, int heads, int d, int i) {
	if (!g) return a;
	int c = h * d + i;
	return a * (float)sigmoid_d((double)(g[(long long)t * heads * d + c] * sg[c]));
}
