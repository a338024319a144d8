// Minimal CUDA declarations for TestKernelsParse: clang's CUDA front end
// checks the syntax and types of Reel's NVRTC program (common.cuh and every
// kernels/*.cu, as program() joins them) on a machine without a card or a
// CUDA toolkit. NVRTC declares these itself; only what the kernels use is
// here. Inline PTX is not checked (ptxas does that, on the device).
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include <__clang_cuda_builtin_vars.h>
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
__device__ uint2 make_uint2(unsigned, unsigned);
__device__ double rint(double);
__device__ uint4 make_uint4(unsigned, unsigned, unsigned, unsigned);
__device__ float4 make_float4(float, float, float, float);
__device__ void __syncthreads();
__device__ void __threadfence();
__device__ float __shfl_xor_sync(unsigned, float, int, int = 32);
__device__ double __shfl_xor_sync(unsigned, double, int, int = 32);
__device__ int __shfl_xor_sync(unsigned, int, int, int = 32);
__device__ unsigned __shfl_xor_sync(unsigned, unsigned, int, int = 32);
__device__ float __shfl_sync(unsigned, float, int, int = 32);
__device__ int __shfl_sync(unsigned, int, int, int = 32);
__device__ unsigned __shfl_sync(unsigned, unsigned, int, int = 32);
__device__ float __ldg(const float*);
__device__ float4 __ldg(const float4*);
__device__ int __ldg(const int*);
__device__ unsigned int __ldg(const unsigned int*);
__device__ float __ldcg(const float*);
__device__ float4 __ldcg(const float4*);
__device__ int atomicAdd(int*, int);
__device__ unsigned atomicAdd(unsigned*, unsigned);
__device__ float atomicAdd(float*, float);
__device__ int atomicCAS(int*, int, int);
__device__ int atomicExch(int*, int);
__device__ int atomicMax(int*, int);
__device__ int atomicMin(int*, int);
__device__ unsigned atomicOr(unsigned*, unsigned);
__device__ unsigned __ballot_sync(unsigned, int);
__device__ int __any_sync(unsigned, int);
__device__ int __shfl_up_sync(unsigned, int, unsigned, int = 32);
__device__ float __int_as_float(int);
__device__ float __uint_as_float(unsigned);
__device__ unsigned __float_as_uint(float);
__device__ int __float_as_int(float);
__device__ float expf(float); __device__ double exp(double);
__device__ float exp2f(float);
__device__ float logf(float); __device__ double log(double);
__device__ float sqrtf(float); __device__ double sqrt(double);
__device__ float rsqrtf(float); __device__ double rsqrt(double);
__device__ float fmaf(float, float, float); __device__ double fma(double, double, double);
__device__ float fmaxf(float, float); __device__ float fminf(float, float);
__device__ double fmax(double, double); __device__ double fmin(double, double);
__device__ float fabsf(float); __device__ double fabs(double);
__device__ float tanhf(float); __device__ double tanh(double);
__device__ void sincos(double, double*, double*); __device__ void sincosf(float, float*, float*);
__device__ double cos(double); __device__ double sin(double); __device__ double pow(double, double);
__device__ float powf(float, float); __device__ double log1p(double); __device__ float log1pf(float);
__device__ float __expf(float);
__device__ int min(int, int); __device__ int max(int, int);
__device__ unsigned min(unsigned, unsigned); __device__ unsigned max(unsigned, unsigned);
__device__ long long min(long long, long long); __device__ long long max(long long, long long);
__device__ float min(float, float); __device__ float max(float, float);
__device__ int __popc(unsigned); __device__ int __clz(int); __device__ int __ffs(int);
__device__ float roundf(float);
__device__ unsigned __byte_perm(unsigned, unsigned, unsigned);
