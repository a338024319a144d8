package cu

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
)

// maxKernelArgs is the most arguments Launch accepts.
const maxKernelArgs = 64

// Module is a loaded PTX or CUBIN image (CUmodule).
type Module struct {
	c *Context
	h uintptr
}

// LoadModule loads a PTX (text) or CUBIN (ELF) image, e.g. the output of
// NVRTC.Compile. PTX is compiled by the driver for the device at load time.
// The module is unloaded by Unload or Context.Close.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuModuleLoadData: empty image")
	}
	if err := c.bind(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	h, r := cuModuleLoadData(c.lib.drv.moduleLoadData, image)
	if r != 0 {
		return nil, c.lib.cuErr(r, fmt.Sprintf("cuModuleLoadData(%d bytes)", len(image)))
	}
	m := &Module{c: c, h: h}
	c.track(m)
	return m, nil
}

func (m *Module) release() error {
	if r := cuCall1(m.c.lib.drv.moduleUnload, m.h); r != 0 {
		return m.c.lib.cuErr(r, "cuModuleUnload")
	}
	return nil
}

// Unload unloads the module; its Functions must not be launched afterwards.
func (m *Module) Unload() error { return m.c.destroy(m) }

// Function is a kernel of a Module (CUfunction).
type Function struct {
	m    *Module
	h    uintptr
	name string
	// params holds the kernel's parameter sizes in bytes when the driver can
	// report them (cuFuncGetParamInfo, CUDA 12.4+); Launch then checks its
	// arguments against them. Nil when unknown.
	params []uint64
}

// Function looks up the kernel called name. Kernels compiled from CUDA C++
// should be declared extern "C" so their names are not mangled.
func (m *Module) Function(name string) (*Function, error) {
	c := m.c
	if err := c.bind(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	h, r := cuModuleGetFunction(c.lib.drv.moduleGetFunction, m.h, name)
	if r != 0 {
		return nil, c.lib.cuErr(r, fmt.Sprintf("cuModuleGetFunction(%q)", name))
	}
	f := &Function{m: m, h: h, name: name}
	if fn := c.lib.drv.funcGetParamInfo; fn != 0 {
		var sizes []uint64
		for i := 0; i <= maxKernelArgs; i++ {
			_, size, r := cuFuncGetParamInfo(fn, h, i)
			if r != 0 {
				break
			}
			sizes = append(sizes, size)
		}
		// A kernel with no parameters looks the same as a driver that cannot
		// answer; only trust a non-empty answer.
		if len(sizes) > 0 && len(sizes) <= maxKernelArgs {
			f.params = sizes
		}
	}
	return f, nil
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// FuncAttribute is a CUfunction_attribute, for Function.Attribute.
type FuncAttribute int

// Function attributes.
const (
	FuncMaxThreadsPerBlock   FuncAttribute = 0
	FuncSharedSizeBytes      FuncAttribute = 1 // static shared memory
	FuncConstSizeBytes       FuncAttribute = 2
	FuncLocalSizeBytes       FuncAttribute = 3 // per-thread local memory (spills)
	FuncNumRegs              FuncAttribute = 4
	FuncPTXVersion           FuncAttribute = 5
	FuncBinaryVersion        FuncAttribute = 6
	FuncMaxDynamicSharedSize FuncAttribute = 8
	// FuncSharedCarveout is the preferred share of the unified L1 and
	// shared memory given to shared memory, in percent (a hint).
	FuncSharedCarveout FuncAttribute = 9
)

// Attribute returns a kernel attribute, e.g. FuncNumRegs.
func (f *Function) Attribute(a FuncAttribute) (int, error) {
	c := f.m.c
	if err := c.bind(); err != nil {
		return 0, err
	}
	defer runtime.UnlockOSThread()
	v, r := cuFuncGetAttribute(c.lib.drv.funcGetAttribute, f.h, int(a))
	if r != 0 {
		return 0, c.lib.cuErr(r, fmt.Sprintf("cuFuncGetAttribute(%s, %d)", f.name, a))
	}
	return v, nil
}

// SetMaxDynamicSharedBytes allows launches of f with up to bytes of dynamic
// shared memory; needed above 48 KiB.
func (f *Function) SetMaxDynamicSharedBytes(bytes int) error {
	return f.setAttribute(FuncMaxDynamicSharedSize, "max dynamic shared", bytes)
}

// SetSharedCarveout asks for percent of the unified L1 and shared memory
// as shared memory when f runs (100: the most, so that several blocks of
// large shared memory fit on a multiprocessor).
func (f *Function) SetSharedCarveout(percent int) error {
	return f.setAttribute(FuncSharedCarveout, "shared carveout", percent)
}

func (f *Function) setAttribute(a FuncAttribute, what string, v int) error {
	c := f.m.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuFuncSetAttribute(c.lib.drv.funcSetAttribute, f.h, int(a), v); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuFuncSetAttribute(%s, %s, %d)", f.name, what, v))
	}
	return nil
}

// Launch queues fn on the context's stream; see Stream.Launch.
func (c *Context) Launch(fn *Function, grid, block [3]uint32, sharedBytes uint32, args ...any) error {
	return c.stream.Launch(fn, grid, block, sharedBytes, args...)
}

// CanLaunchPDL reports whether launches may use programmatic dependent
// launch: the driver has cuLaunchKernelEx and the device is sm_90 or newer.
func (c *Context) CanLaunchPDL() bool {
	major, _ := c.ComputeCapability()
	return c.lib.drv.launchKernelEx != 0 && major >= 9
}

// LaunchPDL queues fn like Launch, allowed to start before the previous
// kernel on the stream has finished (programmatic dependent launch): the
// kernel must execute griddepcontrol.wait before it touches memory the
// previous kernels write or read. Inside a stream capture this becomes a
// programmatic edge of the CUDA graph. Without support it is Launch.
func (s *Stream) LaunchPDL(fn *Function, grid, block [3]uint32, sharedBytes uint32, args ...any) error {
	c := s.c
	if !c.CanLaunchPDL() {
		return s.Launch(fn, grid, block, sharedBytes, args...)
	}
	var buf [maxKernelArgs * 8]byte
	if err := fn.marshal(&buf, args); err != nil {
		return err
	}
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuLaunchKernelEx(c.lib.drv.launchKernelEx, fn.h, grid, block, sharedBytes, s.h, &buf, len(args)); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuLaunchKernelEx(%s, grid=%v, block=%v, shared=%d)",
			fn.name, grid, block, sharedBytes))
	}
	return nil
}

// Launch queues kernel fn on s with the given grid and block dimensions and
// bytes of dynamic shared memory. Each argument is one kernel parameter and
// must be one of DevicePtr (a pointer parameter), int32, uint32, int64,
// uint64, float32, float64, int16, uint16, int8, uint8 or bool; Go's int is
// refused, being ambiguous. Use the Go type whose size matches the C
// parameter (int -> int32, size_t/long long -> int64/uint64, T* ->
// DevicePtr). When the driver reports the kernel's parameter sizes (CUDA
// 12.4+), a mismatch in count or size is an error instead of a wrong launch.
//
// The arguments are copied into C memory for the call; the driver copies
// them again before returning, so nothing needs to stay alive afterwards.
func (s *Stream) Launch(fn *Function, grid, block [3]uint32, sharedBytes uint32, args ...any) error {
	var buf [maxKernelArgs * 8]byte
	if err := fn.marshal(&buf, args); err != nil {
		return err
	}
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuLaunchKernel(c.lib.drv.launchKernel, fn.h, grid, block, sharedBytes, s.h, &buf, len(args)); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuLaunchKernel(%s, grid=%v, block=%v, shared=%d)",
			fn.name, grid, block, sharedBytes))
	}
	return nil
}

// marshal writes each argument into its 8-byte slot of buf (native byte
// order, low bytes first) and checks the arguments against the kernel's
// parameter sizes when known.
func (f *Function) marshal(buf *[maxKernelArgs * 8]byte, args []any) error {
	if len(args) > maxKernelArgs {
		return fmt.Errorf("cuLaunchKernel(%s): %d arguments, at most %d supported", f.name, len(args), maxKernelArgs)
	}
	if f.params != nil && len(args) != len(f.params) {
		return fmt.Errorf("cuLaunchKernel(%s): kernel takes %d parameters, got %d arguments", f.name, len(f.params), len(args))
	}
	ne := binary.NativeEndian
	for i, a := range args {
		slot := buf[i*8 : i*8+8]
		var size uint64
		switch v := a.(type) {
		case DevicePtr:
			ne.PutUint64(slot, uint64(v))
			size = 8
		case uint64:
			ne.PutUint64(slot, v)
			size = 8
		case int64:
			ne.PutUint64(slot, uint64(v))
			size = 8
		case float64:
			ne.PutUint64(slot, math.Float64bits(v))
			size = 8
		case int32:
			ne.PutUint32(slot, uint32(v))
			size = 4
		case uint32:
			ne.PutUint32(slot, v)
			size = 4
		case float32:
			ne.PutUint32(slot, math.Float32bits(v))
			size = 4
		case int16:
			ne.PutUint16(slot, uint16(v))
			size = 2
		case uint16:
			ne.PutUint16(slot, v)
			size = 2
		case int8:
			slot[0] = byte(v)
			size = 1
		case uint8:
			slot[0] = v
			size = 1
		case bool:
			if v {
				slot[0] = 1
			}
			size = 1
		default:
			return fmt.Errorf("cuLaunchKernel(%s): argument %d has unsupported type %T "+
				"(use DevicePtr, int32, uint32, int64, uint64, float32, float64, int16, uint16, int8, uint8 or bool)",
				f.name, i, a)
		}
		if f.params != nil && f.params[i] != size {
			return fmt.Errorf("cuLaunchKernel(%s): parameter %d is %d bytes, argument is %T (%d bytes)",
				f.name, i, f.params[i], a, size)
		}
	}
	return nil
}
