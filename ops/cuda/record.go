package cuda

import (
	"errors"
	"fmt"

	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

// Recording is a list of bound steps recorded once as a CUDA graph (stream
// capture, then cuGraphInstantiate) and replayed with one launch. Per-run
// values live in the call record, so one recording serves every position.
// With Options.Eager (REEL_GRAPHS=0) it keeps the steps and runs them.
type Recording struct {
	be    *Backend
	steps []ops.Step // eager only
	graph *cu.Graph
	exec  *cu.GraphExec
	// closed marks a closed recording.
	closed bool
	// Updates counts in-place updates; Reinstantiations counts updates the
	// driver refused, done by instantiating the new graph instead.
	Updates, Reinstantiations int
}

// Record captures steps (bound on this backend) into an executable graph
// without running them.
func (be *Backend) Record(steps []ops.Step) (*Recording, error) {
	if err := be.check(); err != nil {
		return nil, err
	}
	r := &Recording{be: be}
	if be.opts.Eager {
		r.steps = append([]ops.Step(nil), steps...)
		return r, nil
	}
	g, err := be.capture(steps)
	if err != nil {
		return nil, err
	}
	exec, err := g.Instantiate()
	if err != nil {
		g.Destroy()
		return nil, fmt.Errorf("cuda: instantiate: %w", err)
	}
	r.graph, r.exec = g, exec
	return r, nil
}

// capture runs steps under stream capture and returns the captured graph.
func (be *Backend) capture(steps []ops.Step) (*cu.Graph, error) {
	if err := be.ctx.BeginCapture(cu.CaptureThreadLocal); err != nil {
		return nil, fmt.Errorf("cuda: begin capture: %w", err)
	}
	for i, st := range steps {
		if err := st.Run(); err != nil {
			if g, e := be.ctx.EndCapture(); e == nil {
				g.Destroy()
			}
			return nil, fmt.Errorf("cuda: capture of step %d: %w", i, err)
		}
	}
	g, err := be.ctx.EndCapture()
	if err != nil {
		return nil, fmt.Errorf("cuda: end capture: %w", err)
	}
	return g, nil
}

// Eager reports whether the recording runs its steps one by one.
func (r *Recording) Eager() bool { return r.exec == nil }

// Replay enqueues the recorded work on the backend's stream.
func (r *Recording) Replay() error {
	if err := r.be.check(); err != nil {
		return err
	}
	if r.closed {
		return errors.New("cuda: recording is closed")
	}
	if r.exec == nil {
		for _, st := range r.steps {
			if err := st.Run(); err != nil {
				return err
			}
		}
		return nil
	}
	return r.exec.Launch(r.be.ctx.Stream())
}

// Update replaces the recording by steps of the same plan bound to other
// buffers: the executable graph is updated in place (cuGraphExecUpdate) or,
// when the driver refuses, instantiated anew.
func (r *Recording) Update(steps []ops.Step) error {
	if err := r.be.check(); err != nil {
		return err
	}
	if r.closed {
		return errors.New("cuda: recording is closed")
	}
	if r.exec == nil {
		r.steps = append([]ops.Step(nil), steps...)
		return nil
	}
	g, err := r.be.capture(steps)
	if err != nil {
		return err
	}
	if err := r.exec.Update(g); err != nil {
		if !errors.Is(err, cu.ErrGraphUpdateRefused) {
			g.Destroy()
			return fmt.Errorf("cuda: graph update: %w", err)
		}
		exec, ierr := g.Instantiate()
		if ierr != nil {
			g.Destroy()
			return fmt.Errorf("cuda: graph update refused (%v), instantiate: %w", err, ierr)
		}
		r.exec.Destroy()
		r.exec = exec
		r.Reinstantiations++
	} else {
		r.Updates++
	}
	r.graph.Destroy()
	r.graph = g
	return nil
}

// Close releases the executable graph.
func (r *Recording) Close() error {
	var first error
	if r.exec != nil && !r.be.closed {
		first = r.exec.Destroy()
		if err := r.graph.Destroy(); err != nil && first == nil {
			first = err
		}
	}
	r.exec, r.graph, r.steps, r.closed = nil, nil, nil, true
	return first
}

// RecordPlan records steps as a CUDA graph (ops.Recorder), for the capture
// engine.
func (be *Backend) RecordPlan(steps []ops.Step) (ops.Recording, error) {
	r, err := be.Record(steps)
	if err != nil {
		return nil, err
	}
	return r, nil
}

var _ ops.Recorder = (*Backend)(nil)
