//go:build !cgo

package cu

// Without cgo the CUDA libraries cannot be reached: dlOpen fails, so Load
// returns ErrUnavailable and none of the other stubs below is ever called.
// They exist so the package (and everything importing it) still builds with
// CGO_ENABLED=0.

import "unsafe"

const cgoEnabled = false

const errNoCgo int32 = 999 // CUDA_ERROR_UNKNOWN

func dlOpen(path string) (uintptr, string) {
	return 0, "built without cgo (CGO_ENABLED=0)"
}
func dlSym(uintptr, string) uintptr { return 0 }
func dlPath(uintptr) string         { return "" }

func cuU32(uintptr, uint32) int32                                               { return errNoCgo }
func cuIntOut(uintptr) (int, int32)                                             { return 0, errNoCgo }
func cuCall0(uintptr) int32                                                     { return errNoCgo }
func cuCall1(uintptr, uintptr) int32                                            { return errNoCgo }
func cuCall2(uintptr, uintptr, uintptr) int32                                   { return errNoCgo }
func cuDevCall(uintptr, int32) int32                                            { return errNoCgo }
func cuDeviceGet(uintptr, int) (int32, int32)                                   { return 0, errNoCgo }
func cuDeviceGetName(uintptr, int32) (string, int32)                            { return "", errNoCgo }
func cuDeviceTotalMem(uintptr, int32) (uint64, int32)                           { return 0, errNoCgo }
func cuDeviceGetAttribute(uintptr, int, int32) (int, int32)                     { return 0, errNoCgo }
func cuPrimaryCtxRetain(uintptr, int32) (uintptr, int32)                        { return 0, errNoCgo }
func cuMemGetInfo(uintptr) (uint64, uint64, int32)                              { return 0, 0, errNoCgo }
func cuMemAlloc(uintptr, uint64) (uint64, int32)                                { return 0, errNoCgo }
func cuMemFree(uintptr, uint64) int32                                           { return errNoCgo }
func cuMemAllocHost(uintptr, uint64) (unsafe.Pointer, int32)                    { return nil, errNoCgo }
func cuMemFreeHost(uintptr, unsafe.Pointer) int32                               { return errNoCgo }
func cuMemcpyDtoHPinned(uintptr, unsafe.Pointer, uint64, uint64, uintptr) int32 { return errNoCgo }
func cuMemcpyHtoDAsync(uintptr, uint64, []byte, uintptr) int32                  { return errNoCgo }
func cuMemcpyDtoHAsync(uintptr, []byte, uint64, uintptr) int32                  { return errNoCgo }
func cuMemcpyDtoDAsync(uintptr, uint64, uint64, uint64, uintptr) int32          { return errNoCgo }
func cuMemsetD8Async(uintptr, uint64, uint8, uint64, uintptr) int32             { return errNoCgo }
func cuMemsetD32Async(uintptr, uint64, uint32, uint64, uintptr) int32           { return errNoCgo }
func cuCreateFlags(uintptr, uint32) (uintptr, int32)                            { return 0, errNoCgo }
func cuEventElapsedTime(uintptr, uintptr, uintptr) (float32, int32)             { return 0, errNoCgo }
func cuModuleLoadData(uintptr, []byte) (uintptr, int32)                         { return 0, errNoCgo }
func cuModuleGetFunction(uintptr, uintptr, string) (uintptr, int32)             { return 0, errNoCgo }
func cuFuncSetAttribute(uintptr, uintptr, int, int) int32                       { return errNoCgo }
func cuFuncGetAttribute(uintptr, uintptr, int) (int, int32)                     { return 0, errNoCgo }
func cuFuncGetParamInfo(uintptr, uintptr, int) (uint64, uint64, int32)          { return 0, 0, errNoCgo }
func cuLaunchKernel(uintptr, uintptr, [3]uint32, [3]uint32, uint32, uintptr, *[maxKernelArgs * 8]byte, int) int32 {
	return errNoCgo
}

func cuLaunchKernelEx(uintptr, uintptr, [3]uint32, [3]uint32, uint32, uintptr, *[maxKernelArgs * 8]byte, int) int32 {
	return errNoCgo
}
func cuStreamBeginCapture(uintptr, uintptr, int) int32               { return errNoCgo }
func cuStreamEndCapture(uintptr, uintptr) (uintptr, int32)           { return 0, errNoCgo }
func cuStreamIsCapturing(uintptr, uintptr) (int, int32)              { return 0, errNoCgo }
func cuGraphInstantiate(uintptr, uintptr, uint64) (uintptr, int32)   { return 0, errNoCgo }
func cuGraphExecUpdate(uintptr, bool, uintptr, uintptr) (int, int32) { return 0, errNoCgo }
func cuGraphNodeCount(uintptr, uintptr) (int, int32)                 { return 0, errNoCgo }
func cuErrorText(uintptr, int32) string                              { return "" }

func nvrtcVersion(uintptr) (int, int, int32) { return 0, 0, errNoCgo }
func nvrtcCompile(*nvrtcSyms, string, string, []string, bool) ([]byte, string, string, int32) {
	return nil, "", "nvrtcCreateProgram", errNoCgo
}
func nvrtcErrorString(uintptr, int32) string { return "" }

func cublasCreate(uintptr) (uintptr, int32)                        { return 0, errNoCgo }
func cublasCall1(uintptr, uintptr) int32                           { return errNoCgo }
func cublasCall2(uintptr, uintptr, uintptr) int32                  { return errNoCgo }
func cublasSetWorkspace(uintptr, uintptr, uint64, uint64) int32    { return errNoCgo }
func cublasSetMathMode(uintptr, uintptr, int) int32                { return errNoCgo }
func cublasGetProperty(uintptr, int) (int, int32)                  { return 0, errNoCgo }
func cublasGemmEx(uintptr, uintptr, *gemmCall) int32               { return errNoCgo }
func cublasGemmStridedBatchedEx(uintptr, uintptr, *gemmCall) int32 { return errNoCgo }
func cublasStatusText(uintptr, int32) string                       { return "" }
