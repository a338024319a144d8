// Rounding f32 activations to the 16-bit types the tensor-core products
// read (elementwise.cu's to_half, window.cu's window rows, fused_slerp.cu).

// half_split writes x rounded to bf16 (wt 1) or f16 (wt 2) to *hi and,
// when lo is not null, the rounded remainder x − hi to *lo.
__device__ __forceinline__ void half_split(float x, u16* hi, u16* lo, int wt) {
	u16 h = wt == WT_BF16 ? f32_to_bf16(x) : f32_to_f16(x);
	*hi = h;
	if (lo) {
		float r = x - (wt == WT_BF16 ? bf16_to_f32(h) : f16_to_f32(h));
		*lo = wt == WT_BF16 ? f32_to_bf16(r) : f32_to_f16(r);
	}
}

// half_split4 is half_split of four consecutive elements, stored 8 bytes
// at a time (hi and lo 8-byte aligned).
__device__ __forceinline__ void half_split4(float4 x, u16* hi, u16* lo, int wt) {
	u16 h[4], l[4];
	half_split(x.x, h, l, wt);
	half_split(x.y, h + 1, l + 1, wt);
	half_split(x.z, h + 2, l + 2, wt);
	half_split(x.w, h + 3, l + 3, wt);
	*(uint2*)hi = make_uint2((u32)h[0] | (u32)h[1] << 16, (u32)h[2] | (u32)h[3] << 16);
	if (lo) *(uint2*)lo = make_uint2((u32)l[0] | (u32)l[1] << 16, (u32)l[2] | (u32)l[3] << 16);
}

// half_vec says whether n elements from x, hi and lo can go four at a time.
__device__ __forceinline__ bool half_vec(const float* x, const u16* hi, const u16* lo, long long n) {
	return (n & 3) == 0 && ((unsigned long long)x & 15) == 0 && ((unsigned long long)hi & 7) == 0 &&
	       ((unsigned long long)lo & 7) == 0;
}

// SNH_PER is the activations a thread of swiglu_norm_half keeps in
// registers between its two passes.
#define SNH_PER 8
