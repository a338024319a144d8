//go:build unix

package weights

import (
	"os"
	"syscall"
)

// openNoBlock opens path read-only without blocking: a FIFO with no writer
// opens at once (and is then refused by the caller's check of its type).
// On a regular file the flag has no effect.
func openNoBlock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
