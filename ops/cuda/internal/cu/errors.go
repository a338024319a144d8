package cu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Result is a CUDA driver API result code (CUresult).
type Result int32

// Driver result codes callers may want to test for.
const (
	ResultSuccess                  Result = 0
	ResultInvalidValue             Result = 1
	ResultOutOfMemory              Result = 2
	ResultNotInitialized           Result = 3
	ResultStubLibrary              Result = 34
	ResultNoDevice                 Result = 100
	ResultInvalidImage             Result = 200
	ResultNotFound                 Result = 500
	ResultNotReady                 Result = 600
	ResultIllegalAddress           Result = 700
	ResultLaunchOutOfResources     Result = 701
	ResultStreamCaptureInvalid     Result = 901
	ResultGraphExecUpdateFailure   Result = 910
	ResultUnsupportedPTXVersion    Result = 222
	ResultNoBinaryForGPU           Result = 209
	ResultStreamCaptureUnsupported Result = 900
)

// Error is a failed CUDA driver call. Its message names the call, for example
//
//	cuMemAlloc(1073741824): CUDA_ERROR_OUT_OF_MEMORY (out of memory)
type Error struct {
	Op   string // the call and its key arguments
	Code Result // the driver's result code
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY; empty if the driver does not know the code
	Desc string // e.g. "out of memory"
}

// Error returns "<call>: <CUDA_ERROR_NAME> (<description>)".
func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = "CUDA error " + strconv.Itoa(int(e.Code))
	}
	if e.Desc == "" {
		return e.Op + ": " + name
	}
	return e.Op + ": " + name + " (" + e.Desc + ")"
}

// cuErr builds the Error for result r of call op.
func (l *Lib) cuErr(r int32, op string) error {
	return &Error{
		Op:   op,
		Code: Result(r),
		Name: cuErrorText(l.drv.getErrorName, r),
		Desc: cuErrorText(l.drv.getErrorString, r),
	}
}

// IsResult reports whether err is, or wraps, a driver Error with code r.
func IsResult(err error, r Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == r
}

// ErrClosed is returned by operations on a Context after Close.
var ErrClosed = errors.New("cuda: context closed")

// CompileError is a failed NVRTC call. For a failed compilation Log holds
// NVRTC's compile log, which is also part of the message.
type CompileError struct {
	Op   string // the NVRTC call, e.g. "nvrtcCompileProgram"
	Name string // the program name given to Compile
	Code int32  // nvrtcResult
	Desc string // e.g. NVRTC_ERROR_COMPILATION
	Log  string // the compile log, possibly empty
}

// Error returns "<call>(<name>): <NVRTC_ERROR_NAME>" followed by the log.
func (e *CompileError) Error() string {
	desc := e.Desc
	if desc == "" {
		desc = "NVRTC error " + strconv.Itoa(int(e.Code))
	}
	msg := fmt.Sprintf("%s(%s): %s", e.Op, e.Name, desc)
	if log := strings.TrimSpace(e.Log); log != "" {
		msg += "\n" + log
	}
	return msg
}

// BLASError is a failed cuBLAS call, for example
//
//	cublasGemmEx(T, N, m=4096, n=16, k=4096): CUBLAS_STATUS_INVALID_VALUE (an invalid value was used as an argument)
type BLASError struct {
	Op     string // the call and its key arguments
	Status int32  // cublasStatus_t
	Name   string // e.g. CUBLAS_STATUS_INVALID_VALUE
	Desc   string // cuBLAS's description, when available
}

// Error returns "<call>: <CUBLAS_STATUS_NAME> (<description>)".
func (e *BLASError) Error() string {
	name := e.Name
	if name == "" {
		name = "CUBLAS status " + strconv.Itoa(int(e.Status))
	}
	if e.Desc == "" || e.Desc == e.Name {
		return e.Op + ": " + name
	}
	return e.Op + ": " + name + " (" + e.Desc + ")"
}

// ErrGraphUpdateRefused is matched (errors.Is) by the error GraphExec.Update
// returns when the driver refuses to update an executable graph in place;
// the caller should instantiate the new graph instead.
var ErrGraphUpdateRefused = errors.New("cuda: graph exec update refused")

// GraphUpdateResult says why cuGraphExecUpdate refused an update
// (CUgraphExecUpdateResult).
type GraphUpdateResult int

// Values of GraphUpdateResult.
const (
	GraphUpdateSuccess                   GraphUpdateResult = 0
	GraphUpdateError                     GraphUpdateResult = 1
	GraphUpdateTopologyChanged           GraphUpdateResult = 2
	GraphUpdateNodeTypeChanged           GraphUpdateResult = 3
	GraphUpdateFunctionChanged           GraphUpdateResult = 4
	GraphUpdateParametersChanged         GraphUpdateResult = 5
	GraphUpdateNotSupported              GraphUpdateResult = 6
	GraphUpdateUnsupportedFunctionChange GraphUpdateResult = 7
	GraphUpdateAttributesChanged         GraphUpdateResult = 8
)

// String describes the result, e.g. "topology changed".
func (r GraphUpdateResult) String() string {
	switch r {
	case GraphUpdateSuccess:
		return "success"
	case GraphUpdateError:
		return "error"
	case GraphUpdateTopologyChanged:
		return "topology changed"
	case GraphUpdateNodeTypeChanged:
		return "node type changed"
	case GraphUpdateFunctionChanged:
		return "function changed"
	case GraphUpdateParametersChanged:
		return "parameters changed"
	case GraphUpdateNotSupported:
		return "not supported"
	case GraphUpdateUnsupportedFunctionChange:
		return "unsupported function change"
	case GraphUpdateAttributesChanged:
		return "attributes changed"
	}
	return "update result " + strconv.Itoa(int(r))
}

// GraphUpdateRefusedError is returned by GraphExec.Update when the driver
// refuses the update. It matches ErrGraphUpdateRefused with errors.Is.
type GraphUpdateRefusedError struct {
	Reason GraphUpdateResult // why, as reported by the driver
	Err    error             // the driver error (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
}

// Error says the update was refused, why, and the driver error.
func (e *GraphUpdateRefusedError) Error() string {
	return "cuda: graph exec update refused (" + e.Reason.String() + "): " + e.Err.Error()
}

// Is reports whether target is ErrGraphUpdateRefused.
func (e *GraphUpdateRefusedError) Is(target error) bool { return target == ErrGraphUpdateRefused }

// Unwrap returns the driver error.
func (e *GraphUpdateRefusedError) Unwrap() error { return e.Err }
