package cu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Environment variables that name a library file to try before the default
// search. They are meant for unusual installs; normally none is needed.
const (
	EnvLibCUDA   = "REEL_LIBCUDA"   // path of libcuda.so
	EnvLibNVRTC  = "REEL_LIBNVRTC"  // path of libnvrtc.so
	EnvLibCUBLAS = "REEL_LIBCUBLAS" // path of libcublas.so
)

// ErrUnavailable is wrapped by the error Load returns when the CUDA driver
// cannot be used (no libcuda, no device, built without cgo...). Its message,
// with the detail, is a single line suitable as a test skip reason.
var ErrUnavailable = errors.New("cuda: unavailable")

// ErrNVRTCUnavailable is wrapped by the error Lib.NVRTC returns when no usable
// libnvrtc is found. The driver may still be used without it.
var ErrNVRTCUnavailable = errors.New("cuda: nvrtc unavailable")

// ErrCUBLASUnavailable is wrapped by the error Lib.CUBLAS returns when no
// usable libcublas is found. The driver may still be used without it.
var ErrCUBLASUnavailable = errors.New("cuda: cublas unavailable")

// Lib is the loaded CUDA driver library, initialised with cuInit. It is safe
// for concurrent use. NVRTC and cuBLAS are loaded on first use through
// Lib.NVRTC and Lib.CUBLAS, each at most once per Lib.
//
// The shared libraries stay loaded for the life of the process (dlopen keeps
// a reference count; unloading libcuda is never safe while a context lives).
type Lib struct {
	drv     driverSyms
	path    string
	version int

	nvrtcOnce sync.Once
	nvrtc     *NVRTC
	nvrtcErr  error

	blasOnce sync.Once
	blas     *CUBLAS
	blasErr  error
}

// driverSyms holds the libcuda entry points, as found by dlsym.
type driverSyms struct {
	init, driverGetVersion, deviceGetCount, deviceGet, deviceGetName, deviceTotalMem,
	deviceGetAttribute, primaryCtxRetain, primaryCtxRelease, ctxSetCurrent, ctxSynchronize,
	memGetInfo, memAlloc, memFree, memAllocHost, memFreeHost, memcpyHtoDAsync, memcpyDtoHAsync, memcpyDtoDAsync,
	memsetD8Async, memsetD32Async, streamCreate, streamDestroy, streamSynchronize,
	streamBeginCapture, streamEndCapture, streamIsCapturing, eventCreate, eventRecord,
	eventSynchronize, eventElapsedTime, eventDestroy, moduleLoadData, moduleGetFunction,
	moduleUnload, funcSetAttribute, funcGetAttribute, funcGetParamInfo, launchKernel, launchKernelEx,
	graphInstantiate, graphLaunch, graphExecUpdate, graphDestroy, graphExecDestroy,
	graphGetNodes, getErrorName, getErrorString uintptr

	// graphExecUpdateV2 reports whether graphExecUpdate has the CUDA 12+
	// signature (cuGraphExecUpdate_v2) rather than the CUDA 11 one.
	graphExecUpdateV2 bool
}

// symSpec names one entry point: the first name dlsym finds is used.
type symSpec struct {
	dst      *uintptr
	optional bool
	names    []string
}

func sym(dst *uintptr, names ...string) symSpec { return symSpec{dst: dst, names: names} }
func optSym(dst *uintptr, names ...string) symSpec {
	return symSpec{dst: dst, optional: true, names: names}
}

// resolve looks up every spec in handle; it returns an error naming the first
// required symbol that is missing.
func resolve(handle uintptr, specs []symSpec) error {
	for _, s := range specs {
		for _, n := range s.names {
			if p := dlSym(handle, n); p != 0 {
				*s.dst = p
				break
			}
		}
		if *s.dst == 0 && !s.optional {
			return fmt.Errorf("symbol %s not found", s.names[0])
		}
	}
	return nil
}

func (d *driverSyms) specs() []symSpec {
	return []symSpec{
		sym(&d.init, "cuInit"),
		sym(&d.driverGetVersion, "cuDriverGetVersion"),
		sym(&d.deviceGetCount, "cuDeviceGetCount"),
		sym(&d.deviceGet, "cuDeviceGet"),
		sym(&d.deviceGetName, "cuDeviceGetName"),
		sym(&d.deviceTotalMem, "cuDeviceTotalMem_v2"),
		sym(&d.deviceGetAttribute, "cuDeviceGetAttribute"),
		sym(&d.primaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		sym(&d.primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
		sym(&d.ctxSetCurrent, "cuCtxSetCurrent"),
		sym(&d.ctxSynchronize, "cuCtxSynchronize"),
		sym(&d.memGetInfo, "cuMemGetInfo_v2"),
		sym(&d.memAlloc, "cuMemAlloc_v2"),
		sym(&d.memFree, "cuMemFree_v2"),
		sym(&d.memAllocHost, "cuMemAllocHost_v2"),
		sym(&d.memFreeHost, "cuMemFreeHost"),
		sym(&d.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
		sym(&d.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
		sym(&d.memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
		sym(&d.memsetD8Async, "cuMemsetD8Async"),
		sym(&d.memsetD32Async, "cuMemsetD32Async"),
		sym(&d.streamCreate, "cuStreamCreate"),
		sym(&d.streamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
		sym(&d.streamSynchronize, "cuStreamSynchronize"),
		sym(&d.streamBeginCapture, "cuStreamBeginCapture_v2"),
		sym(&d.streamEndCapture, "cuStreamEndCapture"),
		sym(&d.streamIsCapturing, "cuStreamIsCapturing"),
		sym(&d.eventCreate, "cuEventCreate"),
		sym(&d.eventRecord, "cuEventRecord"),
		sym(&d.eventSynchronize, "cuEventSynchronize"),
		// Same signature in both; CUDA 12.8+ adds _v2.
		sym(&d.eventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
		sym(&d.eventDestroy, "cuEventDestroy_v2", "cuEventDestroy"),
		sym(&d.moduleLoadData, "cuModuleLoadData"),
		sym(&d.moduleGetFunction, "cuModuleGetFunction"),
		sym(&d.moduleUnload, "cuModuleUnload"),
		sym(&d.funcSetAttribute, "cuFuncSetAttribute"),
		sym(&d.funcGetAttribute, "cuFuncGetAttribute"),
		optSym(&d.funcGetParamInfo, "cuFuncGetParamInfo"), // CUDA 12.4+
		sym(&d.launchKernel, "cuLaunchKernel"),
		optSym(&d.launchKernelEx, "cuLaunchKernelEx"), // CUDA 12.0+
		sym(&d.graphInstantiate, "cuGraphInstantiateWithFlags"),
		sym(&d.graphLaunch, "cuGraphLaunch"),
		sym(&d.graphDestroy, "cuGraphDestroy"),
		sym(&d.graphExecDestroy, "cuGraphExecDestroy"),
		sym(&d.graphGetNodes, "cuGraphGetNodes"),
		sym(&d.getErrorName, "cuGetErrorName"),
		sym(&d.getErrorString, "cuGetErrorString"),
	}
}

// Load opens the CUDA driver library (libcuda.so.1, then libcuda.so and a few
// well-known paths) and calls cuInit. Each call opens the library anew (dlopen
// only counts references); callers keep the returned *Lib.
//
// When CUDA cannot be used the error wraps ErrUnavailable and reads as one
// line, for example
//
//	cuda: unavailable: libcuda.so.1: cannot open shared object file: No such file or directory
func Load() (*Lib, error) {
	h, _, err := openFirst(driverCandidates(), nil)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	l := &Lib{}
	if err := resolve(h, l.drv.specs()); err != nil {
		return nil, unavailable("libcuda: " + err.Error())
	}
	if p := dlSym(h, "cuGraphExecUpdate_v2"); p != 0 {
		l.drv.graphExecUpdate, l.drv.graphExecUpdateV2 = p, true
	} else if p := dlSym(h, "cuGraphExecUpdate"); p != 0 {
		l.drv.graphExecUpdate = p
	} else {
		return nil, unavailable("libcuda: symbol cuGraphExecUpdate_v2 not found")
	}
	l.path = dlPath(l.drv.init)
	if r := cuU32(l.drv.init, 0); r != 0 {
		return nil, unavailable(l.cuErr(r, "cuInit").Error())
	}
	v, r := cuIntOut(l.drv.driverGetVersion)
	if r != 0 {
		return nil, unavailable(l.cuErr(r, "cuDriverGetVersion").Error())
	}
	l.version = v
	n, r := cuIntOut(l.drv.deviceGetCount)
	if r != 0 {
		return nil, unavailable(l.cuErr(r, "cuDeviceGetCount").Error())
	}
	if n == 0 {
		return nil, unavailable("no CUDA device")
	}
	return l, nil
}

func unavailable(detail string) error {
	return fmt.Errorf("%w: %s", ErrUnavailable, oneLine(detail))
}

// oneLine folds s onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// DriverVersion returns the CUDA version the driver supports, encoded as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func (l *Lib) DriverVersion() int { return l.version }

// Path returns the file the driver library was loaded from, when known.
func (l *Lib) Path() string { return l.path }

// DeviceCount returns the number of CUDA devices visible to the process.
func (l *Lib) DeviceCount() (int, error) {
	n, r := cuIntOut(l.drv.deviceGetCount)
	if r != 0 {
		return 0, l.cuErr(r, "cuDeviceGetCount")
	}
	return n, nil
}

// existing returns the paths among ps that exist.
func existing(ps ...string) []string {
	var out []string
	for _, p := range ps {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// globNewestFirst expands the patterns, newest library version first.
func globNewestFirst(patterns ...string) []string {
	var out []string
	seen := map[string]bool{}
	for _, pat := range patterns {
		ms, _ := filepath.Glob(pat)
		sort.SliceStable(ms, func(i, j int) bool { return versionLess(ms[j], ms[i]) })
		for _, m := range ms {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	return out
}

// versionLess orders paths by the numbers in them, numerically, so that
// libfoo.so.12.8 < libfoo.so.13 and cuda-12.9 < cuda-13.0.
func versionLess(a, b string) bool {
	na, nb := numbers(a), numbers(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if na[i] != nb[i] {
			return na[i] < nb[i]
		}
	}
	if len(na) != len(nb) {
		return len(na) < len(nb)
	}
	return a < b
}

func numbers(s string) []int {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func envFirst(env string, rest []string) []string {
	if p := os.Getenv(env); p != "" {
		return append([]string{p}, rest...)
	}
	return rest
}

func driverCandidates() []string {
	c := []string{"libcuda.so.1", "libcuda.so"}
	c = append(c, existing(
		"/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"/usr/lib/aarch64-linux-gnu/libcuda.so.1",
		"/usr/lib64/libcuda.so.1",
		"/usr/lib/wsl/lib/libcuda.so.1",
	)...)
	return envFirst(EnvLibCUDA, c)
}

func nvrtcCandidates() []string {
	c := []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}
	c = append(c, globNewestFirst(
		"/usr/local/cuda/lib64/libnvrtc.so*",
		"/usr/local/cuda-*/lib64/libnvrtc.so*",
		"/usr/local/cuda*/targets/*-linux/lib/libnvrtc.so*",
		"/usr/lib/x86_64-linux-gnu/libnvrtc.so*",
		"/usr/lib/aarch64-linux-gnu/libnvrtc.so*",
		"/usr/lib64/libnvrtc.so*",
	)...)
	return envFirst(EnvLibNVRTC, c)
}

func cublasCandidates() []string {
	c := []string{"libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}
	c = append(c, globNewestFirst(
		"/usr/local/cuda/lib64/libcublas.so*",
		"/usr/local/cuda-*/lib64/libcublas.so*",
		"/usr/local/cuda*/targets/*-linux/lib/libcublas.so*",
		"/usr/lib/x86_64-linux-gnu/libcublas.so*",
		"/usr/lib/aarch64-linux-gnu/libcublas.so*",
		"/usr/lib64/libcublas.so*",
	)...)
	return envFirst(EnvLibCUBLAS, c)
}

// preloadSibling returns a hook for openFirst that, before a library is
// loaded by path, loads the newest file matching pattern in the same
// directory: a dependency (libcublasLt for libcublas, libnvrtc-builtins for
// libnvrtc) that may not be on the loader's search path. Once loaded, the
// dependency is found by its soname. Failures are ignored.
func preloadSibling(pattern string) func(path string) {
	return func(path string) {
		for _, dep := range globNewestFirst(filepath.Join(filepath.Dir(path), pattern)) {
			if h, _ := dlOpen(dep); h != 0 {
				return
			}
		}
	}
}

// openFirst dlopens the first candidate that loads. Before a candidate given
// as a path, before(path) is called (used to load sibling dependencies). The
// error, if all fail, is the first candidate's dlerror message.
func openFirst(cands []string, before func(path string)) (uintptr, string, error) {
	first := ""
	for _, c := range cands {
		if before != nil && strings.Contains(c, "/") {
			before(c)
		}
		h, msg := dlOpen(c)
		if h != 0 {
			return h, c, nil
		}
		if first == "" {
			first = msg
		}
	}
	if first == "" {
		first = "no candidate library"
	}
	return 0, "", errors.New(oneLine(first))
}
