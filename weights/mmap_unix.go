//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package weights

import (
	"os"
	"syscall"
)

// mmapFile maps the first size bytes of f read-only and shared.
func mmapFile(f *os.File, size int) ([]byte, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var data []byte
	var merr error
	if err := rc.Control(func(fd uintptr) {
		data, merr = syscall.Mmap(int(fd), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	}); err != nil {
		return nil, err
	}
	return data, merr
}

// munmap releases a mapping made by mmapFile.
func munmap(data []byte) error { return syscall.Munmap(data) }
