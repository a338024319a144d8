//go:build cgo

package cu

// This file is the only one that uses cgo. It holds our own minimal C
// declarations of the CUDA driver, NVRTC and cuBLAS entry points (no CUDA
// headers are needed at build time), the dlopen/dlsym helpers, and one small C
// trampoline per call shape: each takes the function pointer found by dlsym as
// a uintptr_t and calls through it, so Go never calls a C function pointer
// directly. Handles cross the boundary as uintptr_t (they are C pointers,
// never Go pointers) and device pointers as unsigned long long.

/*
#cgo CFLAGS: -D_GNU_SOURCE
#cgo LDFLAGS: -ldl
#cgo noescape t_cuLaunchKernel
#cgo nocallback t_cuLaunchKernel
#cgo noescape t_cuLaunchKernelEx
#cgo nocallback t_cuLaunchKernelEx

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void *CUgraphNode;
typedef void *CUevent;
typedef void *nvrtcProgram;
typedef int nvrtcResult;
typedef void *cublasHandle_t;
typedef int cublasStatus_t;

// CUgraphExecUpdateResultInfo (CUDA 12+).
typedef struct {
	int result;
	CUgraphNode errorNode;
	CUgraphNode errorFromNode;
} reelGraphExecUpdateResultInfo;

#define REEL_MAX_KERNEL_ARGS 64

// ---- dl ----

static uintptr_t reel_dlopen(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		if (e == NULL) e = "dlopen failed";
		strncpy(err, e, errlen - 1);
		err[errlen - 1] = 0;
	}
	return (uintptr_t)h;
}

static uintptr_t reel_dlsym(uintptr_t h, const char *name) {
	return (uintptr_t)dlsym((void *)h, name);
}

static int reel_dladdr(uintptr_t sym, char *out, size_t outlen) {
	Dl_info info;
	if (dladdr((void *)sym, &info) == 0 || info.dli_fname == NULL) return 0;
	strncpy(out, info.dli_fname, outlen - 1);
	out[outlen - 1] = 0;
	return 1;
}

// ---- driver trampolines, by call shape ----

static CUresult t_u32(uintptr_t fn, unsigned v) { return ((CUresult(*)(unsigned))fn)(v); }
static CUresult t_intOut(uintptr_t fn, int *v) { return ((CUresult(*)(int *))fn)(v); }
static CUresult t_call0(uintptr_t fn) { return ((CUresult(*)(void))fn)(); }
static CUresult t_call1(uintptr_t fn, uintptr_t a) { return ((CUresult(*)(void *))fn)((void *)a); }
static CUresult t_call2(uintptr_t fn, uintptr_t a, uintptr_t b) {
	return ((CUresult(*)(void *, void *))fn)((void *)a, (void *)b);
}
static CUresult t_dev(uintptr_t fn, CUdevice d) { return ((CUresult(*)(CUdevice))fn)(d); }

static CUresult t_cuDeviceGet(uintptr_t fn, CUdevice *d, int ordinal) {
	return ((CUresult(*)(CUdevice *, int))fn)(d, ordinal);
}
static CUresult t_cuDeviceGetName(uintptr_t fn, char *name, int len, CUdevice d) {
	return ((CUresult(*)(char *, int, CUdevice))fn)(name, len, d);
}
static CUresult t_cuDeviceTotalMem(uintptr_t fn, unsigned long long *bytes, CUdevice d) {
	size_t b = 0;
	CUresult r = ((CUresult(*)(size_t *, CUdevice))fn)(&b, d);
	*bytes = b;
	return r;
}
static CUresult t_cuDeviceGetAttribute(uintptr_t fn, int *v, int attr, CUdevice d) {
	return ((CUresult(*)(int *, int, CUdevice))fn)(v, attr, d);
}
static CUresult t_cuDevicePrimaryCtxRetain(uintptr_t fn, uintptr_t *ctx, CUdevice d) {
	CUcontext c = NULL;
	CUresult r = ((CUresult(*)(CUcontext *, CUdevice))fn)(&c, d);
	*ctx = (uintptr_t)c;
	return r;
}
static CUresult t_cuMemGetInfo(uintptr_t fn, unsigned long long *free_, unsigned long long *total) {
	size_t f = 0, t = 0;
	CUresult r = ((CUresult(*)(size_t *, size_t *))fn)(&f, &t);
	*free_ = f;
	*total = t;
	return r;
}
static CUresult t_cuMemAlloc(uintptr_t fn, CUdeviceptr *p, unsigned long long n) {
	return ((CUresult(*)(CUdeviceptr *, size_t))fn)(p, (size_t)n);
}
static CUresult t_cuMemFree(uintptr_t fn, CUdeviceptr p) { return ((CUresult(*)(CUdeviceptr))fn)(p); }
static CUresult t_cuMemAllocHost(uintptr_t fn, void **p, unsigned long long n) {
	return ((CUresult(*)(void **, size_t))fn)(p, (size_t)n);
}
static CUresult t_cuMemFreeHost(uintptr_t fn, void *p) { return ((CUresult(*)(void *))fn)(p); }
static CUresult t_cuMemcpyHtoDAsync(uintptr_t fn, CUdeviceptr dst, const void *src, unsigned long long n, uintptr_t s) {
	return ((CUresult(*)(CUdeviceptr, const void *, size_t, CUstream))fn)(dst, src, (size_t)n, (CUstream)s);
}
static CUresult t_cuMemcpyDtoHAsync(uintptr_t fn, void *dst, CUdeviceptr src, unsigned long long n, uintptr_t s) {
	return ((CUresult(*)(void *, CUdeviceptr, size_t, CUstream))fn)(dst, src, (size_t)n, (CUstream)s);
}
static CUresult t_cuMemcpyDtoDAsync(uintptr_t fn, CUdeviceptr dst, CUdeviceptr src, unsigned long long n, uintptr_t s) {
	return ((CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))fn)(dst, src, (size_t)n, (CUstream)s);
}
static CUresult t_cuMemsetD8Async(uintptr_t fn, CUdeviceptr dst, unsigned char v, unsigned long long n, uintptr_t s) {
	return ((CUresult(*)(CUdeviceptr, unsigned char, size_t, CUstream))fn)(dst, v, (size_t)n, (CUstream)s);
}
static CUresult t_cuMemsetD32Async(uintptr_t fn, CUdeviceptr dst, unsigned int v, unsigned long long n, uintptr_t s) {
	return ((CUresult(*)(CUdeviceptr, unsigned int, size_t, CUstream))fn)(dst, v, (size_t)n, (CUstream)s);
}
// cuStreamCreate(CUstream*, unsigned) and cuEventCreate(CUevent*, unsigned).
static CUresult t_createFlags(uintptr_t fn, uintptr_t *out, unsigned flags) {
	void *h = NULL;
	CUresult r = ((CUresult(*)(void **, unsigned))fn)(&h, flags);
	*out = (uintptr_t)h;
	return r;
}
static CUresult t_cuEventElapsedTime(uintptr_t fn, float *ms, uintptr_t start, uintptr_t end) {
	return ((CUresult(*)(float *, CUevent, CUevent))fn)(ms, (CUevent)start, (CUevent)end);
}
static CUresult t_cuModuleLoadData(uintptr_t fn, uintptr_t *mod, const void *image) {
	CUmodule m = NULL;
	CUresult r = ((CUresult(*)(CUmodule *, const void *))fn)(&m, image);
	*mod = (uintptr_t)m;
	return r;
}
static CUresult t_cuModuleGetFunction(uintptr_t fn, uintptr_t *out, uintptr_t mod, const char *name) {
	CUfunction f = NULL;
	CUresult r = ((CUresult(*)(CUfunction *, CUmodule, const char *))fn)(&f, (CUmodule)mod, name);
	*out = (uintptr_t)f;
	return r;
}
static CUresult t_cuFuncSetAttribute(uintptr_t fn, uintptr_t f, int attr, int v) {
	return ((CUresult(*)(CUfunction, int, int))fn)((CUfunction)f, attr, v);
}
static CUresult t_cuFuncGetAttribute(uintptr_t fn, int *v, int attr, uintptr_t f) {
	return ((CUresult(*)(int *, int, CUfunction))fn)(v, attr, (CUfunction)f);
}
static CUresult t_cuFuncGetParamInfo(uintptr_t fn, uintptr_t f, unsigned long long idx, unsigned long long *off, unsigned long long *size) {
	size_t o = 0, s = 0;
	CUresult r = ((CUresult(*)(CUfunction, size_t, size_t *, size_t *))fn)((CUfunction)f, (size_t)idx, &o, &s);
	*off = o;
	*size = s;
	return r;
}

// t_cuLaunchKernel copies the n 8-byte argument slots from args into C stack
// memory and builds the void* kernelParams array there, so the driver only
// ever sees C memory. cuLaunchKernel copies the parameters before it returns.
static CUresult t_cuLaunchKernel(uintptr_t fn, uintptr_t f,
		unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz,
		unsigned shared, uintptr_t stream,
		const unsigned char *args, int n) {
	unsigned long long vals[REEL_MAX_KERNEL_ARGS];
	void *params[REEL_MAX_KERNEL_ARGS];
	if (n < 0 || n > REEL_MAX_KERNEL_ARGS) return 1; // CUDA_ERROR_INVALID_VALUE
	if (n > 0) memcpy(vals, args, (size_t)n * 8);
	for (int i = 0; i < n; i++) params[i] = &vals[i];
	return ((CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			unsigned, CUstream, void **, void **))fn)(
		(CUfunction)f, gx, gy, gz, bx, by, bz, shared, (CUstream)stream,
		n > 0 ? params : NULL, NULL);
}
// reelLaunchConfig and reelLaunchAttribute mirror CUlaunchConfig and
// CUlaunchAttribute (CUDA 12): an attribute is a 4-byte id, 4 bytes of
// padding and a 64-byte value union.
typedef struct {
	int id;
	char pad[4];
	union { int i; char bytes[64]; } value;
} reelLaunchAttribute;
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shared;
	void *stream;
	reelLaunchAttribute *attrs;
	unsigned numAttrs;
} reelLaunchConfig;

// t_cuLaunchKernelEx launches like t_cuLaunchKernel with the programmatic
// stream serialization attribute (id 6): the kernel may start while the
// previous one on the stream finishes, and waits for it with
// griddepcontrol.wait (programmatic dependent launch, sm_90+).
static CUresult t_cuLaunchKernelEx(uintptr_t fn, uintptr_t f,
		unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz,
		unsigned shared, uintptr_t stream,
		const unsigned char *args, int n) {
	unsigned long long vals[REEL_MAX_KERNEL_ARGS];
	void *params[REEL_MAX_KERNEL_ARGS];
	if (n < 0 || n > REEL_MAX_KERNEL_ARGS) return 1; // CUDA_ERROR_INVALID_VALUE
	if (n > 0) memcpy(vals, args, (size_t)n * 8);
	for (int i = 0; i < n; i++) params[i] = &vals[i];
	reelLaunchAttribute attr;
	memset(&attr, 0, sizeof attr);
	attr.id = 6; // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
	attr.value.i = 1;
	reelLaunchConfig cfg = {gx, gy, gz, bx, by, bz, shared, (void *)stream, &attr, 1};
	return ((CUresult(*)(const reelLaunchConfig *, CUfunction, void **, void **))fn)(
		&cfg, (CUfunction)f, n > 0 ? params : NULL, NULL);
}
static CUresult t_cuStreamBeginCapture(uintptr_t fn, uintptr_t s, int mode) {
	return ((CUresult(*)(CUstream, int))fn)((CUstream)s, mode);
}
static CUresult t_cuStreamEndCapture(uintptr_t fn, uintptr_t s, uintptr_t *g) {
	CUgraph graph = NULL;
	CUresult r = ((CUresult(*)(CUstream, CUgraph *))fn)((CUstream)s, &graph);
	*g = (uintptr_t)graph;
	return r;
}
static CUresult t_cuStreamIsCapturing(uintptr_t fn, uintptr_t s, int *status) {
	return ((CUresult(*)(CUstream, int *))fn)((CUstream)s, status);
}
static CUresult t_cuGraphInstantiateWithFlags(uintptr_t fn, uintptr_t *exec, uintptr_t g, unsigned long long flags) {
	CUgraphExec e = NULL;
	CUresult r = ((CUresult(*)(CUgraphExec *, CUgraph, unsigned long long))fn)(&e, (CUgraph)g, flags);
	*exec = (uintptr_t)e;
	return r;
}
// cuGraphExecUpdate_v2(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*), CUDA 12+.
static CUresult t_cuGraphExecUpdateV2(uintptr_t fn, uintptr_t exec, uintptr_t g, int *result) {
	reelGraphExecUpdateResultInfo info;
	memset(&info, 0, sizeof info);
	CUresult r = ((CUresult(*)(CUgraphExec, CUgraph, reelGraphExecUpdateResultInfo *))fn)(
		(CUgraphExec)exec, (CUgraph)g, &info);
	*result = info.result;
	return r;
}
// cuGraphExecUpdate(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*), CUDA 11.
static CUresult t_cuGraphExecUpdateV1(uintptr_t fn, uintptr_t exec, uintptr_t g, int *result) {
	CUgraphNode node = NULL;
	int res = 0;
	CUresult r = ((CUresult(*)(CUgraphExec, CUgraph, CUgraphNode *, int *))fn)(
		(CUgraphExec)exec, (CUgraph)g, &node, &res);
	*result = res;
	return r;
}
static CUresult t_cuGraphGetNodes(uintptr_t fn, uintptr_t g, unsigned long long *n) {
	size_t count = 0;
	CUresult r = ((CUresult(*)(CUgraph, CUgraphNode *, size_t *))fn)((CUgraph)g, NULL, &count);
	*n = count;
	return r;
}
// cuGetErrorName / cuGetErrorString.
static const char *t_cuErrorText(uintptr_t fn, CUresult code) {
	const char *s = NULL;
	if (((CUresult(*)(CUresult, const char **))fn)(code, &s) != 0) return NULL;
	return s;
}

// ---- NVRTC ----

static nvrtcResult t_nvrtcVersion(uintptr_t fn, int *major, int *minor) {
	return ((nvrtcResult(*)(int *, int *))fn)(major, minor);
}
static nvrtcResult t_nvrtcCreateProgram(uintptr_t fn, uintptr_t *prog, const char *src, const char *name) {
	nvrtcProgram p = NULL;
	nvrtcResult r = ((nvrtcResult(*)(nvrtcProgram *, const char *, const char *, int,
			const char *const *, const char *const *))fn)(&p, src, name, 0, NULL, NULL);
	*prog = (uintptr_t)p;
	return r;
}
static nvrtcResult t_nvrtcCompileProgram(uintptr_t fn, uintptr_t prog, int n, char **opts) {
	return ((nvrtcResult(*)(nvrtcProgram, int, const char *const *))fn)(
		(nvrtcProgram)prog, n, (const char *const *)opts);
}
// nvrtcGetProgramLogSize / nvrtcGetPTXSize / nvrtcGetCUBINSize.
static nvrtcResult t_nvrtcGetSize(uintptr_t fn, uintptr_t prog, unsigned long long *n) {
	size_t s = 0;
	nvrtcResult r = ((nvrtcResult(*)(nvrtcProgram, size_t *))fn)((nvrtcProgram)prog, &s);
	*n = s;
	return r;
}
// nvrtcGetProgramLog / nvrtcGetPTX / nvrtcGetCUBIN.
static nvrtcResult t_nvrtcGetData(uintptr_t fn, uintptr_t prog, char *out) {
	return ((nvrtcResult(*)(nvrtcProgram, char *))fn)((nvrtcProgram)prog, out);
}
static nvrtcResult t_nvrtcDestroyProgram(uintptr_t fn, uintptr_t prog) {
	nvrtcProgram p = (nvrtcProgram)prog;
	return ((nvrtcResult(*)(nvrtcProgram *))fn)(&p);
}
static const char *t_nvrtcGetErrorString(uintptr_t fn, nvrtcResult r) {
	return ((const char *(*)(nvrtcResult))fn)(r);
}

// ---- cuBLAS ----

static cublasStatus_t t_cublasCreate(uintptr_t fn, uintptr_t *h) {
	cublasHandle_t handle = NULL;
	cublasStatus_t st = ((cublasStatus_t(*)(cublasHandle_t *))fn)(&handle);
	*h = (uintptr_t)handle;
	return st;
}
static cublasStatus_t t_cublasCall1(uintptr_t fn, uintptr_t h) {
	return ((cublasStatus_t(*)(cublasHandle_t))fn)((cublasHandle_t)h);
}
static cublasStatus_t t_cublasCall2(uintptr_t fn, uintptr_t h, uintptr_t a) {
	return ((cublasStatus_t(*)(cublasHandle_t, void *))fn)((cublasHandle_t)h, (void *)a);
}
static cublasStatus_t t_cublasSetWorkspace(uintptr_t fn, uintptr_t h, CUdeviceptr ws, unsigned long long n) {
	return ((cublasStatus_t(*)(cublasHandle_t, void *, size_t))fn)((cublasHandle_t)h, (void *)(uintptr_t)ws, (size_t)n);
}
static cublasStatus_t t_cublasSetMathMode(uintptr_t fn, uintptr_t h, int mode) {
	return ((cublasStatus_t(*)(cublasHandle_t, int))fn)((cublasHandle_t)h, mode);
}
static cublasStatus_t t_cublasGetProperty(uintptr_t fn, int type, int *v) {
	return ((cublasStatus_t(*)(int, int *))fn)(type, v);
}
static cublasStatus_t t_cublasGemmEx(uintptr_t fn, uintptr_t h, int ta, int tb, int m, int n, int k,
		float alpha, CUdeviceptr A, int at, int lda, CUdeviceptr B, int bt, int ldb,
		float beta, CUdeviceptr C, int ct, int ldc, int compute, int algo) {
	return ((cublasStatus_t(*)(cublasHandle_t, int, int, int, int, int, const void *,
			const void *, int, int, const void *, int, int, const void *, void *, int, int, int, int))fn)(
		(cublasHandle_t)h, ta, tb, m, n, k, &alpha,
		(const void *)(uintptr_t)A, at, lda, (const void *)(uintptr_t)B, bt, ldb,
		&beta, (void *)(uintptr_t)C, ct, ldc, compute, algo);
}
static cublasStatus_t t_cublasGemmStridedBatchedEx(uintptr_t fn, uintptr_t h, int ta, int tb, int m, int n, int k,
		float alpha, CUdeviceptr A, int at, int lda, long long sa, CUdeviceptr B, int bt, int ldb, long long sb,
		float beta, CUdeviceptr C, int ct, int ldc, long long sc, int batch, int compute, int algo) {
	return ((cublasStatus_t(*)(cublasHandle_t, int, int, int, int, int, const void *,
			const void *, int, int, long long, const void *, int, int, long long, const void *,
			void *, int, int, long long, int, int, int))fn)(
		(cublasHandle_t)h, ta, tb, m, n, k, &alpha,
		(const void *)(uintptr_t)A, at, lda, sa, (const void *)(uintptr_t)B, bt, ldb, sb,
		&beta, (void *)(uintptr_t)C, ct, ldc, sc, batch, compute, algo);
}
// cublasGetStatusName / cublasGetStatusString.
static const char *t_cublasStatusText(uintptr_t fn, cublasStatus_t st) {
	return ((const char *(*)(cublasStatus_t))fn)(st);
}
*/
import "C"

import "unsafe"

// cgoEnabled reports whether this build can reach the CUDA libraries.
const cgoEnabled = true

// ---- dl ----

func dlOpen(path string) (handle uintptr, errMsg string) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	h := C.reel_dlopen(cpath, &buf[0], C.size_t(len(buf)))
	if h == 0 {
		return 0, C.GoString(&buf[0])
	}
	return uintptr(h), ""
}

func dlSym(handle uintptr, name string) uintptr {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return uintptr(C.reel_dlsym(C.uintptr_t(handle), cname))
}

// dlPath returns the file of the shared object holding sym, or "".
func dlPath(sym uintptr) string {
	var buf [4096]C.char
	if C.reel_dladdr(C.uintptr_t(sym), &buf[0], C.size_t(len(buf))) == 0 {
		return ""
	}
	return C.GoString(&buf[0])
}

// ---- driver ----

func cuU32(fn uintptr, v uint32) int32 { return int32(C.t_u32(C.uintptr_t(fn), C.uint(v))) }

func cuIntOut(fn uintptr) (int, int32) {
	var v C.int
	r := C.t_intOut(C.uintptr_t(fn), &v)
	return int(v), int32(r)
}

func cuCall0(fn uintptr) int32 { return int32(C.t_call0(C.uintptr_t(fn))) }

func cuCall1(fn, a uintptr) int32 { return int32(C.t_call1(C.uintptr_t(fn), C.uintptr_t(a))) }

func cuCall2(fn, a, b uintptr) int32 {
	return int32(C.t_call2(C.uintptr_t(fn), C.uintptr_t(a), C.uintptr_t(b)))
}

func cuDevCall(fn uintptr, dev int32) int32 { return int32(C.t_dev(C.uintptr_t(fn), C.CUdevice(dev))) }

func cuDeviceGet(fn uintptr, ordinal int) (int32, int32) {
	var d C.CUdevice
	r := C.t_cuDeviceGet(C.uintptr_t(fn), &d, C.int(ordinal))
	return int32(d), int32(r)
}

func cuDeviceGetName(fn uintptr, dev int32) (string, int32) {
	var buf [256]C.char
	r := C.t_cuDeviceGetName(C.uintptr_t(fn), &buf[0], C.int(len(buf)-1), C.CUdevice(dev))
	if r != 0 {
		return "", int32(r)
	}
	return C.GoString(&buf[0]), 0
}

func cuDeviceTotalMem(fn uintptr, dev int32) (uint64, int32) {
	var b C.ulonglong
	r := C.t_cuDeviceTotalMem(C.uintptr_t(fn), &b, C.CUdevice(dev))
	return uint64(b), int32(r)
}

func cuDeviceGetAttribute(fn uintptr, attr int, dev int32) (int, int32) {
	var v C.int
	r := C.t_cuDeviceGetAttribute(C.uintptr_t(fn), &v, C.int(attr), C.CUdevice(dev))
	return int(v), int32(r)
}

func cuPrimaryCtxRetain(fn uintptr, dev int32) (uintptr, int32) {
	var ctx C.uintptr_t
	r := C.t_cuDevicePrimaryCtxRetain(C.uintptr_t(fn), &ctx, C.CUdevice(dev))
	return uintptr(ctx), int32(r)
}

func cuMemGetInfo(fn uintptr) (free, total uint64, r int32) {
	var f, t C.ulonglong
	rc := C.t_cuMemGetInfo(C.uintptr_t(fn), &f, &t)
	return uint64(f), uint64(t), int32(rc)
}

func cuMemAlloc(fn uintptr, n uint64) (uint64, int32) {
	var p C.CUdeviceptr
	r := C.t_cuMemAlloc(C.uintptr_t(fn), &p, C.ulonglong(n))
	return uint64(p), int32(r)
}

func cuMemFree(fn uintptr, p uint64) int32 {
	return int32(C.t_cuMemFree(C.uintptr_t(fn), C.CUdeviceptr(p)))
}

// cuMemAllocHost allocates n bytes of page-locked host memory (C memory,
// which Go may hold a pointer to).
func cuMemAllocHost(fn uintptr, n uint64) (unsafe.Pointer, int32) {
	var p unsafe.Pointer
	r := C.t_cuMemAllocHost(C.uintptr_t(fn), &p, C.ulonglong(n))
	return p, int32(r)
}

func cuMemFreeHost(fn uintptr, p unsafe.Pointer) int32 {
	return int32(C.t_cuMemFreeHost(C.uintptr_t(fn), p))
}

// cuMemcpyDtoHPinned queues a copy into page-locked memory: unlike a copy
// into Go memory, it is asynchronous.
func cuMemcpyDtoHPinned(fn uintptr, dst unsafe.Pointer, src, n uint64, stream uintptr) int32 {
	return int32(C.t_cuMemcpyDtoHAsync(C.uintptr_t(fn), dst, C.CUdeviceptr(src), C.ulonglong(n), C.uintptr_t(stream)))
}

// cuMemcpyHtoDAsync copies from Go memory. The source is pageable, so the
// driver has finished reading it when the call returns.
func cuMemcpyHtoDAsync(fn uintptr, dst uint64, src []byte, stream uintptr) int32 {
	if len(src) == 0 {
		return 0
	}
	return int32(C.t_cuMemcpyHtoDAsync(C.uintptr_t(fn), C.CUdeviceptr(dst), unsafe.Pointer(&src[0]),
		C.ulonglong(len(src)), C.uintptr_t(stream)))
}

// cuMemcpyDtoHAsync copies into Go memory. The destination is pageable, so
// the driver returns only once the copy has completed.
func cuMemcpyDtoHAsync(fn uintptr, dst []byte, src uint64, stream uintptr) int32 {
	if len(dst) == 0 {
		return 0
	}
	return int32(C.t_cuMemcpyDtoHAsync(C.uintptr_t(fn), unsafe.Pointer(&dst[0]), C.CUdeviceptr(src),
		C.ulonglong(len(dst)), C.uintptr_t(stream)))
}

func cuMemcpyDtoDAsync(fn uintptr, dst, src, n uint64, stream uintptr) int32 {
	return int32(C.t_cuMemcpyDtoDAsync(C.uintptr_t(fn), C.CUdeviceptr(dst), C.CUdeviceptr(src),
		C.ulonglong(n), C.uintptr_t(stream)))
}

func cuMemsetD8Async(fn uintptr, dst uint64, v uint8, n uint64, stream uintptr) int32 {
	return int32(C.t_cuMemsetD8Async(C.uintptr_t(fn), C.CUdeviceptr(dst), C.uchar(v), C.ulonglong(n),
		C.uintptr_t(stream)))
}

func cuMemsetD32Async(fn uintptr, dst uint64, v uint32, n uint64, stream uintptr) int32 {
	return int32(C.t_cuMemsetD32Async(C.uintptr_t(fn), C.CUdeviceptr(dst), C.uint(v), C.ulonglong(n),
		C.uintptr_t(stream)))
}

func cuCreateFlags(fn uintptr, flags uint32) (uintptr, int32) {
	var h C.uintptr_t
	r := C.t_createFlags(C.uintptr_t(fn), &h, C.uint(flags))
	return uintptr(h), int32(r)
}

func cuEventElapsedTime(fn, start, end uintptr) (float32, int32) {
	var ms C.float
	r := C.t_cuEventElapsedTime(C.uintptr_t(fn), &ms, C.uintptr_t(start), C.uintptr_t(end))
	return float32(ms), int32(r)
}

// cuModuleLoadData copies image into C memory with a terminating NUL (PTX
// must be NUL-terminated; a CUBIN ignores it) for the duration of the call.
func cuModuleLoadData(fn uintptr, image []byte) (uintptr, int32) {
	buf := C.malloc(C.size_t(len(image) + 1))
	if buf == nil {
		return 0, 2 // CUDA_ERROR_OUT_OF_MEMORY
	}
	defer C.free(buf)
	b := unsafe.Slice((*byte)(buf), len(image)+1)
	copy(b, image)
	b[len(image)] = 0
	var m C.uintptr_t
	r := C.t_cuModuleLoadData(C.uintptr_t(fn), &m, buf)
	return uintptr(m), int32(r)
}

func cuModuleGetFunction(fn, mod uintptr, name string) (uintptr, int32) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	r := C.t_cuModuleGetFunction(C.uintptr_t(fn), &f, C.uintptr_t(mod), cname)
	return uintptr(f), int32(r)
}

func cuFuncSetAttribute(fn, f uintptr, attr, v int) int32 {
	return int32(C.t_cuFuncSetAttribute(C.uintptr_t(fn), C.uintptr_t(f), C.int(attr), C.int(v)))
}

func cuFuncGetAttribute(fn, f uintptr, attr int) (int, int32) {
	var v C.int
	r := C.t_cuFuncGetAttribute(C.uintptr_t(fn), &v, C.int(attr), C.uintptr_t(f))
	return int(v), int32(r)
}

func cuFuncGetParamInfo(fn, f uintptr, idx int) (off, size uint64, r int32) {
	var o, s C.ulonglong
	rc := C.t_cuFuncGetParamInfo(C.uintptr_t(fn), C.uintptr_t(f), C.ulonglong(idx), &o, &s)
	return uint64(o), uint64(s), int32(rc)
}

// cuLaunchKernel launches f with n arguments, each in an 8-byte slot of args.
// The trampoline copies the slots to C memory before calling the driver.
func cuLaunchKernel(fn, f uintptr, grid, block [3]uint32, shared uint32, stream uintptr,
	args *[maxKernelArgs * 8]byte, n int) int32 {
	return int32(C.t_cuLaunchKernel(C.uintptr_t(fn), C.uintptr_t(f),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shared), C.uintptr_t(stream),
		(*C.uchar)(unsafe.Pointer(&args[0])), C.int(n)))
}

func cuLaunchKernelEx(fn, f uintptr, grid, block [3]uint32, shared uint32, stream uintptr,
	args *[maxKernelArgs * 8]byte, n int) int32 {
	return int32(C.t_cuLaunchKernelEx(C.uintptr_t(fn), C.uintptr_t(f),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shared), C.uintptr_t(stream),
		(*C.uchar)(unsafe.Pointer(&args[0])), C.int(n)))
}

func cuStreamBeginCapture(fn, s uintptr, mode int) int32 {
	return int32(C.t_cuStreamBeginCapture(C.uintptr_t(fn), C.uintptr_t(s), C.int(mode)))
}

func cuStreamEndCapture(fn, s uintptr) (uintptr, int32) {
	var g C.uintptr_t
	r := C.t_cuStreamEndCapture(C.uintptr_t(fn), C.uintptr_t(s), &g)
	return uintptr(g), int32(r)
}

func cuStreamIsCapturing(fn, s uintptr) (int, int32) {
	var st C.int
	r := C.t_cuStreamIsCapturing(C.uintptr_t(fn), C.uintptr_t(s), &st)
	return int(st), int32(r)
}

func cuGraphInstantiate(fn, g uintptr, flags uint64) (uintptr, int32) {
	var e C.uintptr_t
	r := C.t_cuGraphInstantiateWithFlags(C.uintptr_t(fn), &e, C.uintptr_t(g), C.ulonglong(flags))
	return uintptr(e), int32(r)
}

func cuGraphExecUpdate(fn uintptr, v2 bool, exec, g uintptr) (int, int32) {
	var res C.int
	var r C.CUresult
	if v2 {
		r = C.t_cuGraphExecUpdateV2(C.uintptr_t(fn), C.uintptr_t(exec), C.uintptr_t(g), &res)
	} else {
		r = C.t_cuGraphExecUpdateV1(C.uintptr_t(fn), C.uintptr_t(exec), C.uintptr_t(g), &res)
	}
	return int(res), int32(r)
}

func cuGraphNodeCount(fn, g uintptr) (int, int32) {
	var n C.ulonglong
	r := C.t_cuGraphGetNodes(C.uintptr_t(fn), C.uintptr_t(g), &n)
	return int(n), int32(r)
}

func cuErrorText(fn uintptr, code int32) string {
	s := C.t_cuErrorText(C.uintptr_t(fn), C.CUresult(code))
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// ---- NVRTC ----

func nvrtcVersion(fn uintptr) (major, minor int, r int32) {
	var ma, mi C.int
	rc := C.t_nvrtcVersion(C.uintptr_t(fn), &ma, &mi)
	return int(ma), int(mi), int32(rc)
}

// nvrtcCompile runs one whole NVRTC compilation: create the program, compile
// it with opts, fetch the log and the PTX or CUBIN, destroy the program. On
// failure op names the NVRTC call that failed and r is its result.
func nvrtcCompile(s *nvrtcSyms, src, name string, opts []string, cubin bool) (code []byte, log, op string, r int32) {
	csrc := C.CString(src)
	defer C.free(unsafe.Pointer(csrc))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))

	var prog C.uintptr_t
	if rc := C.t_nvrtcCreateProgram(C.uintptr_t(s.createProgram), &prog, csrc, cname); rc != 0 {
		return nil, "", "nvrtcCreateProgram", int32(rc)
	}
	defer func() { C.t_nvrtcDestroyProgram(C.uintptr_t(s.destroyProgram), prog) }()

	// The option strings and the array of pointers to them live in C memory.
	var copts **C.char
	if len(opts) > 0 {
		ptrSize := C.size_t(unsafe.Sizeof((*C.char)(nil)))
		copts = (**C.char)(C.malloc(C.size_t(len(opts)) * ptrSize))
		arr := unsafe.Slice(copts, len(opts))
		for i, o := range opts {
			arr[i] = C.CString(o)
		}
		defer func() {
			for _, p := range arr {
				C.free(unsafe.Pointer(p))
			}
			C.free(unsafe.Pointer(copts))
		}()
	}
	crc := C.t_nvrtcCompileProgram(C.uintptr_t(s.compileProgram), prog, C.int(len(opts)), copts)
	log = string(trimNUL(nvrtcGetBytes(s.getProgramLogSize, s.getProgramLog, prog)))
	if crc != 0 {
		return nil, log, "nvrtcCompileProgram", int32(crc)
	}
	sizeFn, getFn, what := s.getPTXSize, s.getPTX, "nvrtcGetPTX"
	if cubin {
		sizeFn, getFn, what = s.getCUBINSize, s.getCUBIN, "nvrtcGetCUBIN"
	}
	var n C.ulonglong
	if rc := C.t_nvrtcGetSize(C.uintptr_t(sizeFn), prog, &n); rc != 0 {
		return nil, log, what + "Size", int32(rc)
	}
	code = make([]byte, int(n))
	if n > 0 {
		if rc := C.t_nvrtcGetData(C.uintptr_t(getFn), prog, (*C.char)(unsafe.Pointer(&code[0]))); rc != 0 {
			return nil, log, what, int32(rc)
		}
	}
	return code, log, "", 0
}

func nvrtcGetBytes(sizeFn, getFn uintptr, prog C.uintptr_t) []byte {
	var n C.ulonglong
	if C.t_nvrtcGetSize(C.uintptr_t(sizeFn), prog, &n) != 0 || n == 0 {
		return nil
	}
	b := make([]byte, int(n))
	if C.t_nvrtcGetData(C.uintptr_t(getFn), prog, (*C.char)(unsafe.Pointer(&b[0]))) != 0 {
		return nil
	}
	return b
}

func nvrtcErrorString(fn uintptr, r int32) string {
	s := C.t_nvrtcGetErrorString(C.uintptr_t(fn), C.nvrtcResult(r))
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// ---- cuBLAS ----

func cublasCreate(fn uintptr) (uintptr, int32) {
	var h C.uintptr_t
	st := C.t_cublasCreate(C.uintptr_t(fn), &h)
	return uintptr(h), int32(st)
}

func cublasCall1(fn, h uintptr) int32 { return int32(C.t_cublasCall1(C.uintptr_t(fn), C.uintptr_t(h))) }

func cublasCall2(fn, h, a uintptr) int32 {
	return int32(C.t_cublasCall2(C.uintptr_t(fn), C.uintptr_t(h), C.uintptr_t(a)))
}

func cublasSetWorkspace(fn, h uintptr, ws, n uint64) int32 {
	return int32(C.t_cublasSetWorkspace(C.uintptr_t(fn), C.uintptr_t(h), C.CUdeviceptr(ws), C.ulonglong(n)))
}

func cublasSetMathMode(fn, h uintptr, mode int) int32 {
	return int32(C.t_cublasSetMathMode(C.uintptr_t(fn), C.uintptr_t(h), C.int(mode)))
}

func cublasGetProperty(fn uintptr, typ int) (int, int32) {
	var v C.int
	st := C.t_cublasGetProperty(C.uintptr_t(fn), C.int(typ), &v)
	return int(v), int32(st)
}

func cublasGemmEx(fn, h uintptr, g *gemmCall) int32 {
	return int32(C.t_cublasGemmEx(C.uintptr_t(fn), C.uintptr_t(h),
		C.int(g.transA), C.int(g.transB), C.int(g.m), C.int(g.n), C.int(g.k),
		C.float(g.alpha), C.CUdeviceptr(g.a), C.int(g.aType), C.int(g.lda),
		C.CUdeviceptr(g.b), C.int(g.bType), C.int(g.ldb),
		C.float(g.beta), C.CUdeviceptr(g.c), C.int(g.cType), C.int(g.ldc),
		C.int(g.compute), C.int(g.algo)))
}

func cublasGemmStridedBatchedEx(fn, h uintptr, g *gemmCall) int32 {
	return int32(C.t_cublasGemmStridedBatchedEx(C.uintptr_t(fn), C.uintptr_t(h),
		C.int(g.transA), C.int(g.transB), C.int(g.m), C.int(g.n), C.int(g.k),
		C.float(g.alpha), C.CUdeviceptr(g.a), C.int(g.aType), C.int(g.lda), C.longlong(g.strideA),
		C.CUdeviceptr(g.b), C.int(g.bType), C.int(g.ldb), C.longlong(g.strideB),
		C.float(g.beta), C.CUdeviceptr(g.c), C.int(g.cType), C.int(g.ldc), C.longlong(g.strideC),
		C.int(g.batch), C.int(g.compute), C.int(g.algo)))
}

func cublasStatusText(fn uintptr, st int32) string {
	if fn == 0 {
		return ""
	}
	s := C.t_cublasStatusText(C.uintptr_t(fn), C.cublasStatus_t(st))
	if s == nil {
		return ""
	}
	return C.GoString(s)
}
