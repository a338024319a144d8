package cu

import (
	"errors"
	"fmt"
	"runtime"
)

// CaptureMode says which CUDA calls other threads may make while a stream is
// being captured (CUstreamCaptureMode).
type CaptureMode int

const (
	// CaptureGlobal forbids potentially unsafe calls (such as cuMemAlloc or
	// synchronous copies) on every thread while the capture is under way.
	CaptureGlobal CaptureMode = 0
	// CaptureThreadLocal forbids them only on the capturing thread.
	CaptureThreadLocal CaptureMode = 1
	// CaptureRelaxed forbids nothing; the caller takes care.
	CaptureRelaxed CaptureMode = 2
)

// BeginCapture starts capturing the work queued on s into a graph instead of
// running it. The driver ties a capture in CaptureGlobal or
// CaptureThreadLocal mode to the OS thread that began it, so BeginCapture
// locks the calling goroutine to its thread until EndCapture: call both from
// the same goroutine.
func (s *Stream) BeginCapture(mode CaptureMode) error {
	c := s.c
	if err := c.bind(); err != nil {
		return err
	}
	// bind locked the thread; keep it locked on success until EndCapture.
	if r := cuStreamBeginCapture(c.lib.drv.streamBeginCapture, s.h, int(mode)); r != 0 {
		runtime.UnlockOSThread()
		return c.lib.cuErr(r, fmt.Sprintf("cuStreamBeginCapture(mode=%d)", mode))
	}
	s.capturing.Store(true)
	return nil
}

// EndCapture ends the capture begun by BeginCapture and returns the graph of
// the captured work, destroyed by Graph.Destroy or Context.Close. If a
// forbidden call invalidated the capture the error says so
// (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).
func (s *Stream) EndCapture() (*Graph, error) {
	if !s.capturing.Swap(false) {
		return nil, errors.New("cuStreamEndCapture: stream is not capturing")
	}
	c := s.c
	defer runtime.UnlockOSThread() // the lock taken by BeginCapture
	if err := c.bind(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	h, r := cuStreamEndCapture(c.lib.drv.streamEndCapture, s.h)
	if r != 0 {
		if h != 0 {
			cuCall1(c.lib.drv.graphDestroy, h)
		}
		return nil, c.lib.cuErr(r, "cuStreamEndCapture")
	}
	g := &Graph{c: c, h: h}
	c.track(g)
	return g, nil
}

// IsCapturing reports whether s is being captured.
func (s *Stream) IsCapturing() (bool, error) {
	c := s.c
	if err := c.bind(); err != nil {
		return false, err
	}
	defer runtime.UnlockOSThread()
	st, r := cuStreamIsCapturing(c.lib.drv.streamIsCapturing, s.h)
	if r != 0 {
		return false, c.lib.cuErr(r, "cuStreamIsCapturing")
	}
	return st == captureStatusActive || st == captureStatusInvalid, nil
}

// BeginCapture starts capturing the context's stream; see Stream.BeginCapture.
func (c *Context) BeginCapture(mode CaptureMode) error { return c.stream.BeginCapture(mode) }

// EndCapture ends the capture of the context's stream; see Stream.EndCapture.
func (c *Context) EndCapture() (*Graph, error) { return c.stream.EndCapture() }

// Graph is a captured CUDA graph (CUgraph): a template to instantiate.
type Graph struct {
	c *Context
	h uintptr
}

func (g *Graph) release() error {
	if r := cuCall1(g.c.lib.drv.graphDestroy, g.h); r != 0 {
		return g.c.lib.cuErr(r, "cuGraphDestroy")
	}
	return nil
}

// Destroy destroys the graph. Executable graphs made from it stay valid.
func (g *Graph) Destroy() error { return g.c.destroy(g) }

// NumNodes returns the number of nodes in the graph (one per captured
// kernel launch, copy or memset).
func (g *Graph) NumNodes() (int, error) {
	c := g.c
	if err := c.bind(); err != nil {
		return 0, err
	}
	defer runtime.UnlockOSThread()
	n, r := cuGraphNodeCount(c.lib.drv.graphGetNodes, g.h)
	if r != 0 {
		return 0, c.lib.cuErr(r, "cuGraphGetNodes")
	}
	return n, nil
}

// Instantiate makes an executable graph of g (cuGraphInstantiateWithFlags),
// destroyed by GraphExec.Destroy or Context.Close.
func (g *Graph) Instantiate() (*GraphExec, error) {
	c := g.c
	if err := c.bind(); err != nil {
		return nil, err
	}
	defer runtime.UnlockOSThread()
	h, r := cuGraphInstantiate(c.lib.drv.graphInstantiate, g.h, 0)
	if r != 0 {
		return nil, c.lib.cuErr(r, "cuGraphInstantiateWithFlags")
	}
	e := &GraphExec{c: c, h: h}
	c.track(e)
	return e, nil
}

// GraphExec is an executable graph (CUgraphExec), launched as a whole.
type GraphExec struct {
	c *Context
	h uintptr
}

func (e *GraphExec) release() error {
	if r := cuCall1(e.c.lib.drv.graphExecDestroy, e.h); r != 0 {
		return e.c.lib.cuErr(r, "cuGraphExecDestroy")
	}
	return nil
}

// Destroy destroys the executable graph.
func (e *GraphExec) Destroy() error { return e.c.destroy(e) }

// Launch queues the whole graph on s.
func (e *GraphExec) Launch(s *Stream) error {
	c := e.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if r := cuCall2(c.lib.drv.graphLaunch, e.h, s.h); r != 0 {
		return c.lib.cuErr(r, "cuGraphLaunch")
	}
	return nil
}

// Update updates e in place to run g, which must have the same topology as
// the graph e was made from (the same nodes, in the same order, with the
// same kernels); kernel arguments (such as pointers), grid and block sizes
// and copy addresses may differ. This is much cheaper than instantiating g.
//
// When the driver refuses the update the error is a
// *GraphUpdateRefusedError matching ErrGraphUpdateRefused. The driver does
// not promise what e then runs: destroy it and instantiate g instead:
//
//	if err := exec.Update(g); errors.Is(err, cu.ErrGraphUpdateRefused) {
//		exec.Destroy()
//		exec, err = g.Instantiate()
//	}
func (e *GraphExec) Update(g *Graph) error {
	c := e.c
	if err := c.bind(); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	res, r := cuGraphExecUpdate(c.lib.drv.graphExecUpdate, c.lib.drv.graphExecUpdateV2, e.h, g.h)
	if r == 0 {
		return nil
	}
	err := c.lib.cuErr(r, "cuGraphExecUpdate")
	if Result(r) == ResultGraphExecUpdateFailure {
		return &GraphUpdateRefusedError{Reason: GraphUpdateResult(res), Err: err}
	}
	return err
}

// ExecUpdate is exec.Update(g).
func ExecUpdate(exec *GraphExec, g *Graph) error { return exec.Update(g) }
