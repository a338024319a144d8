package main

import (
	"fmt"

	"github.com/reel-runtime/reel/ops"
)

// openCUDA opens the CUDA backend.
func openCUDA() (ops.Backend, error) {
	return nil, fmt.Errorf("cuda: the CUDA backend is not wired into reel yet")
}
