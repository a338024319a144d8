// Package cu binds the CUDA driver API, NVRTC and cuBLAS at run time.
//
// Nothing from the CUDA toolkit is needed to build it: the package carries its
// own minimal C declarations and finds the libraries with dlopen/dlsym when
// Load (libcuda), Lib.NVRTC (libnvrtc) and Lib.CUBLAS (libcublas) are called.
// Every driver entry point is called through a small C trampoline that takes
// the function pointer, so Go never calls a C function pointer itself. On a
// machine without a driver, Load returns a one-line error wrapping
// ErrUnavailable; tests use it as their skip reason. Built with
// CGO_ENABLED=0, the package compiles and Load always fails.
//
// The pieces:
//
//   - Load → *Lib; Lib.NewContext(device) → *Context: the device's primary
//     context plus a non-blocking stream, with memory (Alloc, Free, HtoD,
//     DtoH, DtoD, Memset, MemInfo), device properties, events and Close,
//     which frees everything made through the Context.
//   - Context.LoadModule(PTX or CUBIN) → *Module; Module.Function(name) →
//     *Function; Stream.Launch(fn, grid, block, shared, args...) with Go
//     values as kernel arguments.
//   - Lib.NVRTC → *NVRTC: Compile and CompileCached (disk cache).
//   - Stream.BeginCapture / EndCapture → *Graph; Graph.Instantiate →
//     *GraphExec; GraphExec.Launch, GraphExec.Update.
//   - Context.NewBLAS → *BLAS: GemmEx and MatMulRowMajor.
//   - MeasureCopyBandwidth.
//
// Errors name the call that failed, e.g.
// "cuMemAlloc(1073741824): CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
package cu
