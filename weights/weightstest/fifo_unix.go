//go:build unix

package weightstest

import (
	"os"
	"syscall"
	"testing"
)

// Mkfifo makes path a FIFO (a named pipe), replacing what was there; the
// test is skipped where FIFOs cannot be made.
func Mkfifo(t testing.TB, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}
