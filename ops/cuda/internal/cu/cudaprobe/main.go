// Command cudaprobe prints what Reel's CUDA layer sees on this machine: the
// device's name, compute capability, SM count and memory, the driver, NVRTC
// and cuBLAS versions, and the device-to-device copy bandwidth measured by
// cu.MeasureCopyBandwidth (cuMemcpyDtoDAsync of 1 GiB, repeated, timed with
// CUDA events; counting bytes read plus bytes written), the bound for
// memory-bound kernels.
//
// Usage:
//
//	go build -o bin/cudaprobe ./ops/cuda/internal/cu/cudaprobe
//	cudaprobe [-device N] [-bytes B] [-reps R]
//
// It lives under ops/cuda because Go only lets code under ops/cuda import the
// internal package cu.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/reel-runtime/reel/ops/cuda/internal/cu"
)

func main() {
	device := flag.Int("device", 0, "device ordinal")
	size := flag.Uint64("bytes", 1<<30, "bytes per copy for the bandwidth measurement")
	reps := flag.Int("reps", 20, "timed copies for the bandwidth measurement")
	flag.Parse()
	if err := run(*device, *size, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "cudaprobe:", err)
		os.Exit(1)
	}
}

func run(device int, size uint64, reps int) error {
	lib, err := cu.Load()
	if err != nil {
		return err
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return err
	}
	v := lib.DriverVersion()
	fmt.Printf("driver:      CUDA %d.%d (%s), %d device(s)\n", v/1000, v%1000/10, lib.Path(), n)

	c, err := lib.NewContext(device)
	if err != nil {
		return err
	}
	defer c.Close()
	major, minor := c.ComputeCapability()
	fmt.Printf("device %d:    %s\n", device, c.DeviceName())
	fmt.Printf("compute:     %d.%d (%s), %d SMs\n", major, minor, c.Arch(), c.SMCount())
	free, total, err := c.MemInfo()
	if err != nil {
		return err
	}
	fmt.Printf("memory:      %.1f GiB total, %.1f GiB free\n", gib(total), gib(free))
	if l2, err := c.Attribute(cu.AttrL2CacheSize); err == nil {
		fmt.Printf("L2 cache:    %.1f MiB\n", float64(l2)/(1<<20))
	}

	if nv, err := lib.NVRTC(); err != nil {
		fmt.Printf("nvrtc:       %v\n", err)
	} else {
		ma, mi := nv.Version()
		fmt.Printf("nvrtc:       %d.%d (%s)\n", ma, mi, nv.Path())
	}
	if b, err := lib.CUBLAS(); err != nil {
		fmt.Printf("cublas:      %v\n", err)
	} else {
		ma, mi, pa := b.Version()
		fmt.Printf("cublas:      %d.%d.%d (%s)\n", ma, mi, pa, b.Path())
	}

	bw, err := cu.MeasureCopyBandwidth(c, size, reps)
	if err != nil {
		return fmt.Errorf("copy bandwidth: %w", err)
	}
	fmt.Printf("copy D2D:    %.1f GB/s (%.2f TB/s) read+write bytes; %.1f GB/s copied (%.2f GiB x %d reps)\n",
		bw/1e9, bw/1e12, bw/2e9, gib(size), reps)
	return nil
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }
