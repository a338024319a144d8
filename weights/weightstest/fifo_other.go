//go:build !unix

package weightstest

import "testing"

// Mkfifo skips the test: this system has no FIFOs to make.
func Mkfifo(t testing.TB, path string) {
	t.Helper()
	t.Skip("no FIFOs on this system")
}
