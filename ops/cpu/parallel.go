package cpu

import (
	"fmt"
	"sync"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// minParallelWork is the work (multiply-adds or elements touched) below which
// a kernel runs on the calling goroutine: starting goroutines costs about a
// microsecond each, more than small work takes.
const minParallelWork = 1 << 15

// threadsFor is the goroutines worth using for work units of work.
func (be *Backend) threadsFor(work int) int {
	if work < minParallelWork || be.threads <= 1 {
		return 1
	}
	return be.threads
}

// parallelFor splits [0, n) into at most threads contiguous chunks and calls
// f on each, one of them on the calling goroutine, and returns when all are
// done. A panic in any chunk is raised again on the calling goroutine (where
// the step's guard turns it into an error) after the others have finished.
func parallelFor(n, threads int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if threads > n {
		threads = n
	}
	if threads <= 1 {
		f(0, n)
		return
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fault any
	)
	for i := 1; i < threads; i++ {
		lo, hi := i*n/threads, (i+1)*n/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					mu.Lock()
					if fault == nil {
						fault = p
					}
					mu.Unlock()
				}
			}()
			f(lo, hi)
		}()
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				mu.Lock()
				if fault == nil {
					fault = p
				}
				mu.Unlock()
			}
		}()
		f(0, n/threads)
	}()
	wg.Wait()
	if fault != nil {
		panic(fault)
	}
}

// f32s gives the f32 elements of a buffer, or an error naming it.
func f32s(what string, b *Buffer) ([]float32, error) {
	if b.dt != graph.F32 || len(b.F32) != b.n {
		return nil, fmt.Errorf("%s is a %s buffer of %d elements, want f32", what, b.dt, b.n)
	}
	return b.F32, nil
}

// xAndOutput gives the f32 elements of a kernel's input x and its output,
// or an error naming the one that is not f32.
func xAndOutput(x, y *Buffer) ([]float32, []float32, error) {
	xs, err := f32s("x", x)
	if err != nil {
		return nil, nil, err
	}
	ys, err := f32s("output", y)
	if err != nil {
		return nil, nil, err
	}
	return xs, ys, nil
}

// callRecord reads the position of the first row and the rows to compute
// from a call record; rows is the bucket's rows when the record leaves
// CallRows at 0, and a count outside [0, rows] or a negative position is an
// error.
func callRecord(op string, call *Buffer, rows int) (pos, used int, err error) {
	if call.dt != graph.I32 || len(call.I32) < ops.CallLen {
		return 0, 0, fmt.Errorf("%s: call record is a %s buffer of %d elements", op, call.dt, call.n)
	}
	pos, used = int(call.I32[ops.CallPos]), int(call.I32[ops.CallRows])
	if pos < 0 {
		return 0, 0, fmt.Errorf("%s: negative position %d in the call record", op, pos)
	}
	if used < 0 || used > rows {
		return 0, 0, fmt.Errorf("%s: the call record asks for %d rows of a %d-row plan", op, used, rows)
	}
	if used == 0 {
		used = rows
	}
	return pos, used, nil
}
