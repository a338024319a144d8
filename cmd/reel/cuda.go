package main

import (
	"log/slog"

	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cuda"
)

// cudaFlags are the CUDA backend's settings from the command line.
type cudaFlags struct {
	graphs    bool
	f32AsBF16 bool
	precision precisionFlag
}

// precisionFlag is --precision: how prompt chunks round for the tensor
// cores (cuda.Precision).
type precisionFlag struct{ p cuda.Precision }

func (f *precisionFlag) String() string { return f.p.String() }

func (f *precisionFlag) Set(s string) error {
	p, err := cuda.ParsePrecision(s)
	if err != nil {
		return err
	}
	f.p = p
	return nil
}

// openCUDA opens the CUDA backend on device 0, its messages (the kernels'
// first compile) to log. On an error the backend is a nil interface, never
// a nil *cuda.Backend inside one (whose Close would panic).
func openCUDA(f cudaFlags, log *slog.Logger) (ops.Backend, error) {
	be, err := cuda.New(cuda.Options{Eager: !f.graphs, F32WeightsAsBF16: f.f32AsBF16, Precision: f.precision.p, Logger: log})
	if err != nil {
		return nil, err
	}
	return be, nil
}

// bandwidthMeter is a backend that can measure its memory's copy bandwidth.
type bandwidthMeter interface {
	MeasureCopyBandwidth(bytes uint64, reps int) (float64, error)
}

// matmulPeakMeter is a backend that can measure its dense bf16 matrix rate.
type matmulPeakMeter interface {
	MeasureMatMulPeak(n, reps int) (float64, error)
}

// memoryMeter is a backend that reports its device memory.
type memoryMeter interface {
	MemoryInUse() (used, total uint64, err error)
}
