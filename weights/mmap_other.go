//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package weights

import (
	"errors"
	"os"
)

// mmapFile always fails here, so that OpenFile reads the file instead.
func mmapFile(f *os.File, size int) ([]byte, error) { return nil, errors.ErrUnsupported }

// munmap is never called here: nothing is mapped.
func munmap(data []byte) error { return nil }
