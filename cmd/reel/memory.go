package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/reel-runtime/reel/graph"
)

// syntheticMemory is the host memory a synthetic model of params weights
// of dt takes: the weights as made, and on the CPU (which computes over
// f32) their f32 copy when they are 16-bit.
func syntheticMemory(params int, dt graph.DType, device string) int64 {
	need := int64(params) * int64(dt.Size())
	if device == "cpu" && dt != graph.F32 {
		need += int64(params) * 4
	}
	return need
}

// checkMemory refuses to make a synthetic model the host cannot hold, with
// the numbers, rather than be killed for it half-way (Linux: MemAvailable
// of /proc/meminfo; elsewhere it says nothing).
func checkMemory(name string, need int64) error {
	avail, ok := availableMemory()
	if !ok || need <= avail {
		return nil
	}
	return fmt.Errorf("%s needs about %.1f GB of host memory for its weights and %.1f GB are available (a GPU's host, --device cuda, holds them once; the CPU also keeps an f32 copy of 16-bit weights)",
		name, float64(need)/1e9, float64(avail)/1e9)
}

// availableMemory reads MemAvailable from /proc/meminfo.
func availableMemory() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
