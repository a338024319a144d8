package cu

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// DevicePtr is an address in device memory (CUdeviceptr). Pass it to
// Launch for a pointer kernel parameter.
type DevicePtr uint64

// Offset returns p advanced by bytes.
func (p DevicePtr) Offset(bytes uint64) DevicePtr { return p + DevicePtr(bytes) }

// DeviceAttribute is a CUdevice_attribute, for Context.Attribute.
type DeviceAttribute int

// Device attributes commonly needed by kernels and planners.
const (
	AttrMaxThreadsPerBlock           DeviceAttribute = 1
	AttrMaxSharedMemoryPerBlock      DeviceAttribute = 8
	AttrWarpSize                     DeviceAttribute = 10
	AttrClockRateKHz                 DeviceAttribute = 13
	AttrMultiprocessorCount          DeviceAttribute = 16
	AttrMemoryClockRateKHz           DeviceAttribute = 36
	AttrGlobalMemoryBusWidth         DeviceAttribute = 37
	AttrL2CacheSize                  DeviceAttribute = 38
	AttrMaxThreadsPerMultiprocessor  DeviceAttribute = 39
	AttrComputeCapabilityMajor       DeviceAttribute = 75
	AttrComputeCapabilityMinor       DeviceAttribute = 76
	AttrMaxSharedMemoryPerBlockOptin DeviceAttribute = 97
)

const (
	streamNonBlocking    = 1 // CU_STREAM_NON_BLOCKING
	eventDefault         = 0 // CU_EVENT_DEFAULT (timing enabled)
	eventDisableTiming   = 2 // CU_EVENT_DISABLE_TIMING
	captureStatusActive  = 1 // CU_STREAM_CAPTURE_STATUS_ACTIVE
	captureStatusInvalid = 2 // CU_STREAM_CAPTURE_STATUS_INVALIDATED
)

// resource is something a Context made and frees on Close.
type resource interface{ release() error }

// Context is one device's primary context together with a stream (the
// context's default stream for all the convenience methods) and a record of
// everything made through it, which Close frees.
//
// Methods may be called from any goroutine: each call makes the context
// current on its OS thread for the duration of the call. Close must not run
// concurrently with other methods.
type Context struct {
	lib     *Lib
	ordinal int
	dev     int32
	ctx     uintptr
	stream  *Stream

	name     string
	major    int
	minor    int
	sms      int
	totalMem uint64

	closed atomic.Bool

	mu     sync.Mutex
	allocs map[DevicePtr]uint64
	// stage is page-locked host memory of stageBytes that DtoH copies
	// large reads through (BenchmarkDtoH, 512 KB on the H200: 53 µs, against
	// 70 µs straight into pageable Go memory, which the driver stages itself).
	stage      unsafe.Pointer
	stageBytes uint64
	owned      map[resource]uint64 // resource -> creation sequence number
	seq        uint64
}

// NewContext retains the primary context of device ordinal (0 is the first
// device), reads the device's properties and creates the context's stream (a
// non-blocking stream, so it can be captured into graphs).
func (l *Lib) NewContext(ordinal int) (*Context, error) {
	dev, r := cuDeviceGet(l.drv.deviceGet, ordinal)
	if r != 0 {
		return nil, l.cuErr(r, fmt.Sprintf("cuDeviceGet(%d)", ordinal))
	}
	c := &Context{
		lib:     l,
		ordinal: ordinal,
		dev:     dev,
		allocs:  map[DevicePtr]uint64{},
		owned:   map[resource]uint64{},
	}
	if c.name, r = cuDeviceGetName(l.drv.deviceGetName, dev); r != 0 {
		return nil, l.cuErr(r, "cuDeviceGetName")
	}
	if c.totalMem, r = cuDeviceTotalMem(l.drv.deviceTotalMem, dev); r != 0 {
		return nil, l.cuErr(r, "cuDeviceTotalMem")
	}
	for _, a := range []struct {
		dst  *int
		attr DeviceAttribute
	}{
		{&c.major, AttrComputeCapabilityMajor},
		{&c.minor, AttrComputeCapabilityMinor},
		{&c.sms, AttrMultiprocessorCount},
	} {
		if *a.dst, r = cuDeviceGetAttribute(l.drv.deviceGetAttribute, int(a.attr), dev); r != 0 {
			return nil, l.cuErr(r, fmt.Sprintf("cuDeviceGetAttribute(%d)", a.attr))
		}
	}
	if c.ctx, r = cuPrimaryCtxRetain(l.drv.primaryCtxRetain, dev); r != 0 {
		return nil, l.cuErr(r, fmt.Sprintf("cuDevicePrimaryCtxRetain(%d)", ordinal))
	}
	s, err := c.newStream()
	if err != nil {
		cuDevCall(l.drv.primaryCtxRelease, dev)
		return nil, err
	}
	c.stream = s
	return c, nil
}

// bind makes c current on the calling goroutine's OS thread and locks the
// goroutine to it; the caller must runtime.UnlockOSThread when done.
func (c *Context) bind() error {
	if c.closed.Load() {
		return ErrClosed
	}
	runtime.LockOSThread()
	if r := cuCall1(c.lib.drv.ctxSetCurrent, c.ctx); r != 0 {
		runtime.UnlockOSThread()
		return c.lib.cuErr(r, "cuCtxSetCurrent")
	}
	return nil
}

// track records r for Close.
func (c *Context) track(r resource) {
	c.mu.Lock()
	c.seq++
	c.owned[r] = c.seq
	c.mu.Unlock()
}

// forget removes r from the record and reports whether it was there (false
// once it was destroyed or the context closed).
func (c *Context) forget(r resource) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.owned[r]; !ok {
		return false
	}
	delete(c.owned, r)
	return true
}

// destroy releases r unless it was already released.
func (c *Context) destroy(r resource) error {
	if !c.forget(r) {
		return nil
	}
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	return r.release()
}

// Lib returns the library c was made from.
func (c *Context) Lib() *Lib { return c.lib }

// Device returns the device ordinal.
func (c *Context) Device() int { return c.ordinal }

// DeviceName returns the device's name, e.g. "NVIDIA H200".
func (c *Context) DeviceName() string { return c.name }

// ComputeCapability returns the device's compute capability, e.g. 9, 0.
func (c *Context) ComputeCapability() (major, minor int) { return c.major, c.minor }

// Arch returns the real architecture name for NVRTC, e.g. "sm_90".
func (c *Context) Arch() string { return fmt.Sprintf("sm_%d%d", c.major, c.minor) }

// SMCount returns the number of streaming multiprocessors.
func (c *Context) SMCount() int { return c.sms }

// TotalMem returns the device's total memory in bytes.
func (c *Context) TotalMem() uint64 { return c.totalMem }

// Attribute returns a device attribute.
func (c *Context) Attribute(a DeviceAttribute) (int, error) {
	v, r := cuDeviceGetAttribute(c.lib.drv.deviceGetAttribute, int(a), c.dev)
	if r != 0 {
		return 0, c.lib.cuErr(r, fmt.Sprintf("cuDeviceGetAttribute(%d)", a))
	}
	return v, nil
}

// Stream returns the context's stream, which the Context's own copy,
// memset, launch and capture methods use.
func (c *Context) Stream() *Stream { return c.stream }

// MemInfo returns the device's free and total memory in bytes.
func (c *Context) MemInfo() (free, total uint64, err error) {
	if err := c.bind(); err != nil {
		return 0, 0, err
	}
	defer runtime.UnlockOSThread()
	f, t, r := cuMemGetInfo(c.lib.drv.memGetInfo)
	if r != 0 {
		return 0, 0, c.lib.cuErr(r, "cuMemGetInfo")
	}
	return f, t, nil
}

// Alloc allocates bytes of device memory. The memory is freed by Free or by
// Close.
func (c *Context) Alloc(bytes uint64) (DevicePtr, error) {
	if err := c.bind(); err != nil {
		return 0, err
	}
	defer runtime.UnlockOSThread()
	p, r := cuMemAlloc(c.lib.drv.memAlloc, bytes)
	if r != 0 {
		return 0, c.lib.cuErr(r, fmt.Sprintf("cuMemAlloc(%d)", bytes))
	}
	c.mu.Lock()
	c.allocs[DevicePtr(p)] = bytes
	c.mu.Unlock()
	return DevicePtr(p), nil
}

// Free frees memory returned by Alloc. Freeing 0 does nothing.
func (c *Context) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	c.mu.Lock()
	_, ok := c.allocs[p]
	delete(c.allocs, p)
	c.mu.Unlock()
	if !ok {
		if c.closed.Load() {
			return nil // freed by Close
		}
		return fmt.Errorf("cuMemFree(%#x): not an allocation of this context", uint64(p))
	}
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuMemFree(c.lib.drv.memFree, uint64(p)); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuMemFree(%#x)", uint64(p)))
	}
	return nil
}

// Allocated returns the number of bytes currently allocated through Alloc.
func (c *Context) Allocated() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, b := range c.allocs {
		n += b
	}
	return n
}

// HtoD copies src to device memory at dst and waits for the copy.
func (c *Context) HtoD(dst DevicePtr, src []byte) error {
	if err := c.stream.HtoDAsync(dst, src); err != nil {
		return err
	}
	return c.stream.Sync()
}

// DtoH copies device memory at src into dst, after the work already queued
// on the context's stream, and waits for the copy.
func (c *Context) DtoH(dst []byte, src DevicePtr) error {
	if len(dst) >= stageMin {
		return c.dtohStaged(dst, src, nil, 0)
	}
	if err := c.stream.DtoHAsync(dst, src); err != nil {
		return err
	}
	return c.stream.Sync()
}

// DtoHWith is DtoH of dst from src followed by a copy of tail from
// tailSrc, both through the page-locked stage and under one wait (a read
// and the error record after it: one round trip to the card, not two).
func (c *Context) DtoHWith(dst []byte, src DevicePtr, tail []byte, tailSrc DevicePtr) error {
	return c.dtohStaged(dst, src, tail, tailSrc)
}

// stageMin is the smallest read DtoH copies through the page-locked stage.
const stageMin = 64 << 10

// dtohStaged copies dst's bytes from src, then tail's from tailSrc (none
// when tail is empty), into the page-locked stage (grown to the largest
// read so far), waits, and copies the stage into dst and tail.
func (c *Context) dtohStaged(dst []byte, src DevicePtr, tail []byte, tailSrc DevicePtr) error {
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := uint64(len(dst))
	at := (n + 15) &^ 15 // the tail's place in the stage
	need := at + uint64(len(tail))
	if c.stageBytes < need {
		if c.stage != nil {
			if r := cuMemFreeHost(c.lib.drv.memFreeHost, c.stage); r != 0 {
				return c.lib.cuErr(r, "cuMemFreeHost")
			}
			c.stage, c.stageBytes = nil, 0
		}
		p, r := cuMemAllocHost(c.lib.drv.memAllocHost, need)
		if r != 0 {
			return c.lib.cuErr(r, fmt.Sprintf("cuMemAllocHost(%d bytes)", need))
		}
		c.stage, c.stageBytes = p, need
	}
	if n > 0 {
		if r := cuMemcpyDtoHPinned(c.lib.drv.memcpyDtoHAsync, c.stage, uint64(src), n, c.stream.h); r != 0 {
			return c.lib.cuErr(r, fmt.Sprintf("cuMemcpyDtoHAsync(%#x, %d bytes)", uint64(src), n))
		}
	}
	if len(tail) > 0 {
		if r := cuMemcpyDtoHPinned(c.lib.drv.memcpyDtoHAsync, unsafe.Add(c.stage, at), uint64(tailSrc), uint64(len(tail)), c.stream.h); r != 0 {
			return c.lib.cuErr(r, fmt.Sprintf("cuMemcpyDtoHAsync(%#x, %d bytes)", uint64(tailSrc), len(tail)))
		}
	}
	if r := cuCall1(c.lib.drv.streamSynchronize, c.stream.h); r != 0 {
		return c.lib.cuErr(r, "cuStreamSynchronize")
	}
	copy(dst, unsafe.Slice((*byte)(c.stage), n))
	copy(tail, unsafe.Slice((*byte)(unsafe.Add(c.stage, at)), len(tail)))
	return nil
}

// DtoD copies bytes of device memory from src to dst and waits for the copy.
func (c *Context) DtoD(dst, src DevicePtr, bytes uint64) error {
	if err := c.stream.DtoDAsync(dst, src, bytes); err != nil {
		return err
	}
	return c.stream.Sync()
}

// HtoDAsync queues a copy on the context's stream; see Stream.HtoDAsync.
func (c *Context) HtoDAsync(dst DevicePtr, src []byte) error { return c.stream.HtoDAsync(dst, src) }

// DtoHAsync queues a copy on the context's stream; see Stream.DtoHAsync.
func (c *Context) DtoHAsync(dst []byte, src DevicePtr) error { return c.stream.DtoHAsync(dst, src) }

// DtoDAsync queues a copy on the context's stream.
func (c *Context) DtoDAsync(dst, src DevicePtr, bytes uint64) error {
	return c.stream.DtoDAsync(dst, src, bytes)
}

// Memset sets bytes bytes at dst to v and waits for it.
func (c *Context) Memset(dst DevicePtr, v byte, bytes uint64) error {
	if err := c.stream.MemsetAsync(dst, v, bytes); err != nil {
		return err
	}
	return c.stream.Sync()
}

// MemsetAsync queues a byte memset on the context's stream.
func (c *Context) MemsetAsync(dst DevicePtr, v byte, bytes uint64) error {
	return c.stream.MemsetAsync(dst, v, bytes)
}

// Sync waits for all work in the context (every stream) to finish.
func (c *Context) Sync() error {
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuCall0(c.lib.drv.ctxSynchronize); r != 0 {
		return c.lib.cuErr(r, "cuCtxSynchronize")
	}
	return nil
}

// Close waits for the device, then frees everything made through c that is
// still alive (graphs, modules, events, cuBLAS handles, streams, memory; the
// newest first) and releases the primary context. It returns the first
// error met but always goes on freeing. Closing twice does nothing.
func (c *Context) Close() error {
	if c.closed.Load() {
		return nil
	}
	var errs []error
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuCall0(c.lib.drv.ctxSynchronize); r != 0 {
		errs = append(errs, c.lib.cuErr(r, "cuCtxSynchronize"))
	}

	c.mu.Lock()
	c.closed.Store(true)
	owned := make([]resource, 0, len(c.owned))
	for r := range c.owned {
		owned = append(owned, r)
	}
	sort.Slice(owned, func(i, j int) bool { return c.owned[owned[i]] > c.owned[owned[j]] })
	allocs := c.allocs
	c.owned = map[resource]uint64{}
	c.allocs = map[DevicePtr]uint64{}
	c.mu.Unlock()

	for _, r := range owned {
		if err := r.release(); err != nil {
			errs = append(errs, err)
		}
	}
	for p := range allocs {
		if r := cuMemFree(c.lib.drv.memFree, uint64(p)); r != 0 {
			errs = append(errs, c.lib.cuErr(r, fmt.Sprintf("cuMemFree(%#x)", uint64(p))))
		}
	}
	c.mu.Lock()
	if c.stage != nil {
		if r := cuMemFreeHost(c.lib.drv.memFreeHost, c.stage); r != 0 {
			errs = append(errs, c.lib.cuErr(r, "cuMemFreeHost"))
		}
		c.stage, c.stageBytes = nil, 0
	}
	c.mu.Unlock()
	if err := c.stream.release(); err != nil {
		errs = append(errs, err)
	}
	if r := cuDevCall(c.lib.drv.primaryCtxRelease, c.dev); r != 0 {
		errs = append(errs, c.lib.cuErr(r, "cuDevicePrimaryCtxRelease"))
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// Stream is a CUDA stream of a Context. Work queued on one stream runs in
// order; the Async methods return once the work is queued.
type Stream struct {
	c         *Context
	h         uintptr
	capturing atomic.Bool
}

// NewStream creates an additional non-blocking stream, destroyed by
// Stream.Destroy or Context.Close.
func (c *Context) NewStream() (*Stream, error) {
	s, err := c.newStream()
	if err != nil {
		return nil, err
	}
	c.track(s)
	return s, nil
}

func (c *Context) newStream() (*Stream, error) {
	if err := c.bind(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	h, r := cuCreateFlags(c.lib.drv.streamCreate, streamNonBlocking)
	if r != 0 {
		return nil, c.lib.cuErr(r, "cuStreamCreate")
	}
	return &Stream{c: c, h: h}, nil
}

func (s *Stream) release() error {
	if s.h == 0 {
		return nil
	}
	h := s.h
	s.h = 0
	if r := cuCall1(s.c.lib.drv.streamDestroy, h); r != 0 {
		return s.c.lib.cuErr(r, "cuStreamDestroy")
	}
	return nil
}

// Destroy destroys a stream made by NewStream. The context's own stream is
// destroyed only by Close.
func (s *Stream) Destroy() error {
	if s == s.c.stream {
		return errors.New("cuda: the context's stream is destroyed by Context.Close")
	}
	return s.c.destroy(s)
}

// Context returns the stream's context.
func (s *Stream) Context() *Context { return s.c }

// Sync waits until all work queued on s has finished.
func (s *Stream) Sync() error {
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuCall1(c.lib.drv.streamSynchronize, s.h); r != 0 {
		return c.lib.cuErr(r, "cuStreamSynchronize")
	}
	return nil
}

// HtoDAsync queues a copy of src to device memory at dst. src is ordinary
// (pageable) Go memory, so the driver has taken its copy of src when the
// call returns and src may be reused at once; the transfer to the device
// itself may still be in flight.
func (s *Stream) HtoDAsync(dst DevicePtr, src []byte) error {
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuMemcpyHtoDAsync(c.lib.drv.memcpyHtoDAsync, uint64(dst), src, s.h); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuMemcpyHtoDAsync(%#x, %d bytes)", uint64(dst), len(src)))
	}
	return nil
}

// DtoHAsync queues a copy of device memory at src into dst. dst is pageable
// Go memory, for which the driver returns only once the copy is complete.
func (s *Stream) DtoHAsync(dst []byte, src DevicePtr) error {
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuMemcpyDtoHAsync(c.lib.drv.memcpyDtoHAsync, dst, uint64(src), s.h); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuMemcpyDtoHAsync(%#x, %d bytes)", uint64(src), len(dst)))
	}
	return nil
}

// DtoDAsync queues a copy of bytes of device memory from src to dst.
func (s *Stream) DtoDAsync(dst, src DevicePtr, bytes uint64) error {
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuMemcpyDtoDAsync(c.lib.drv.memcpyDtoDAsync, uint64(dst), uint64(src), bytes, s.h); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuMemcpyDtoDAsync(%#x, %#x, %d)", uint64(dst), uint64(src), bytes))
	}
	return nil
}

// MemsetAsync queues setting bytes bytes at dst to v (cuMemsetD8Async).
func (s *Stream) MemsetAsync(dst DevicePtr, v byte, bytes uint64) error {
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuMemsetD8Async(c.lib.drv.memsetD8Async, uint64(dst), v, bytes, s.h); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuMemsetD8Async(%#x, %d)", uint64(dst), bytes))
	}
	return nil
}

// MemsetD32Async queues setting n 32-bit words at dst (which must be 4-byte
// aligned) to v, e.g. math.Float32bits(1) to fill with 1.0.
func (s *Stream) MemsetD32Async(dst DevicePtr, v uint32, n uint64) error {
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuMemsetD32Async(c.lib.drv.memsetD32Async, uint64(dst), v, n, s.h); r != 0 {
		return c.lib.cuErr(r, fmt.Sprintf("cuMemsetD32Async(%#x, %d)", uint64(dst), n))
	}
	return nil
}

// Record records e on s: e completes when the work queued on s before it has.
func (s *Stream) Record(e *Event) error {
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuCall2(c.lib.drv.eventRecord, e.h, s.h); r != 0 {
		return c.lib.cuErr(r, "cuEventRecord")
	}
	return nil
}

// Event is a CUDA event with timing enabled, for ordering and timing work.
type Event struct {
	c *Context
	h uintptr
}

// NewEvent creates an event, destroyed by Event.Destroy or Context.Close.
func (c *Context) NewEvent() (*Event, error) {
	if err := c.bind(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	h, r := cuCreateFlags(c.lib.drv.eventCreate, eventDefault)
	if r != 0 {
		return nil, c.lib.cuErr(r, "cuEventCreate")
	}
	e := &Event{c: c, h: h}
	c.track(e)
	return e, nil
}

func (e *Event) release() error {
	if r := cuCall1(e.c.lib.drv.eventDestroy, e.h); r != 0 {
		return e.c.lib.cuErr(r, "cuEventDestroy")
	}
	return nil
}

// Destroy destroys the event.
func (e *Event) Destroy() error { return e.c.destroy(e) }

// Sync waits until the event has completed.
func (e *Event) Sync() error {
	c := e.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuCall1(c.lib.drv.eventSynchronize, e.h); r != 0 {
		return c.lib.cuErr(r, "cuEventSynchronize")
	}
	return nil
}

// ElapsedTime returns the device time between two completed events
// (resolution about half a microsecond).
func ElapsedTime(start, end *Event) (time.Duration, error) {
	c := start.c
	if err := c.bind(); err != nil {
		return 0, err
	}
	defer runtime.UnlockOSThread()
	ms, r := cuEventElapsedTime(c.lib.drv.eventElapsedTime, start.h, end.h)
	if r != 0 {
		return 0, c.lib.cuErr(r, "cuEventElapsedTime")
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// Elem is the set of element types Bytes can view as bytes: fixed-size
// numbers with no pointers (use uint16 for bf16/f16 bit patterns).
type Elem interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Bytes returns the memory of s as a byte slice (no copy), for HtoD/DtoH:
//
//	err := c.HtoD(p, cu.Bytes(xs))
func Bytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}
