package cu

import (
	"errors"
	"fmt"
	"time"
)

// MeasureCopyBandwidth measures device-memory bandwidth with device-to-device
// copies: it allocates two buffers of bytes each, runs one warm-up copy, then
// times reps copies of the whole buffer on c's stream with CUDA events.
//
// The result counts the bytes read plus the bytes written, 2*bytes per copy,
// per second: that is the figure to compare with the memory system's
// bandwidth (and what a memory-bound kernel reading and writing achieves).
// Halve it for "bytes copied per second".
func MeasureCopyBandwidth(c *Context, bytes uint64, reps int) (bytesPerSec float64, err error) {
	if bytes == 0 || reps <= 0 {
		return 0, errors.New("cu: MeasureCopyBandwidth: bytes and reps must be positive")
	}
	src, err := c.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, c.Free(src)) }()
	dst, err := c.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, c.Free(dst)) }()

	s := c.Stream()
	if err := s.MemsetAsync(src, 1, bytes); err != nil {
		return 0, err
	}
	d, err := timeReps(c, "MeasureCopyBandwidth", reps, func() error { return s.DtoDAsync(dst, src, bytes) })
	if err != nil {
		return 0, err
	}
	return 2 * float64(bytes) * float64(reps) / d.Seconds(), nil
}

// timeReps runs op once as a warm-up, then times reps runs of it on c's
// stream with CUDA events; what names the measure in errors.
func timeReps(c *Context, what string, reps int, op func() error) (time.Duration, error) {
	if err := op(); err != nil {
		return 0, err
	}
	start, err := c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	s := c.Stream()
	if err := s.Record(start); err != nil {
		return 0, err
	}
	for range reps {
		if err := op(); err != nil {
			return 0, err
		}
	}
	if err := s.Record(end); err != nil {
		return 0, err
	}
	if err := end.Sync(); err != nil {
		return 0, err
	}
	d, err := ElapsedTime(start, end)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("cu: %s: elapsed time %v too small to measure", what, d)
	}
	return d, nil
}
