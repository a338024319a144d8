package weights

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Limits on the side files of a checkpoint folder. They are far above any
// real checkpoint's and keep a hostile one from making a reader allocate
// without bound.
const (
	// MaxConfigLen is the largest config.json ReadConfig reads: 16 MiB.
	MaxConfigLen = 16 << 20
	// MaxIndexLen is the largest model.safetensors.index.json Open reads:
	// 64 MiB.
	MaxIndexLen = 64 << 20
)

// ErrOutsideFolder is the error, wrapped with the file's name, for a file
// of a checkpoint folder that is a symbolic link, or lies in a linked
// folder, whose target is outside the folder.
var ErrOutsideFolder = errors.New("a symbolic link to a file outside the checkpoint folder: refused")

// OpenRegular opens the file at path for reading after checking, on the
// open file, that it is a regular file of at most maxLen bytes (no limit
// when maxLen <= 0), and returns it with its size. A FIFO, a socket or a
// device (/dev/zero) is refused at once: on Unix the file is opened without
// blocking, so a FIFO with no writer does not hang the caller. The caller
// must Close the file.
func OpenRegular(path string, maxLen int64) (*os.File, int64, error) {
	return openRegular(path, path, maxLen)
}

// openRegular is OpenRegular of the file at path, named shown in errors.
func openRegular(path, shown string, maxLen int64) (*os.File, int64, error) {
	f, err := openNoBlock(path)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", shown, pathCause(err))
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", shown, pathCause(err))
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: not a regular file (%s)", shown, fileKind(st.Mode()))
	}
	if maxLen > 0 && st.Size() > maxLen {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %d bytes, more than the limit of %d", shown, st.Size(), maxLen)
	}
	return f, st.Size(), nil
}

// fileKind names the type of a file that is not regular.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// ReadFileMax reads the whole regular file at path, as OpenRegular opens
// it, refusing a file of more than maxLen bytes; a file that grows past
// maxLen while it is read is refused too.
func ReadFileMax(path string, maxLen int64) ([]byte, error) {
	return readFileMax(path, path, maxLen)
}

// readFileMax is ReadFileMax of the file at path, named shown in errors.
func readFileMax(path, shown string, maxLen int64) ([]byte, error) {
	f, size, err := openRegular(path, shown, maxLen)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := readAllLimit(f, make([]byte, 0, size+1), maxLen)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", shown, err)
	}
	return data, nil
}

// readAllLimit appends what r holds to data, failing past maxLen bytes.
func readAllLimit(r io.Reader, data []byte, maxLen int64) ([]byte, error) {
	lr := &io.LimitedReader{R: r, N: maxLen + 1}
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := lr.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if int64(len(data)) > maxLen {
			return nil, fmt.Errorf("more than the limit of %d bytes", maxLen)
		}
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// ResolveIn returns the real path of the file called name in the folder
// dir, after following every symbolic link on the way, and checks that it
// is inside dir or, when dir is a snapshot of a Hugging Face cache
// (.../snapshots/<revision>, whose files are links into ../../blobs/),
// inside that cache's blobs folder. name must be a local path (relative,
// without ".."); dir may itself be a link. A target outside is refused with
// an error wrapping ErrOutsideFolder that names the file in the folder and
// nothing of the target; a missing target wraps fs.ErrNotExist.
func ResolveIn(dir, name string) (string, error) {
	shown := filepath.Join(dir, name)
	if !filepath.IsLocal(name) {
		return "", fmt.Errorf("%s: %q is not a path inside the folder %s", shown, name, dir)
	}
	root, err := realPath(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	real, err := realPath(filepath.Join(root, name))
	if err != nil {
		return "", fmt.Errorf("%s: %w", shown, err)
	}
	if within(root, real) {
		return real, nil
	}
	if snaps := filepath.Dir(root); filepath.Base(snaps) == "snapshots" {
		if within(filepath.Join(filepath.Dir(snaps), "blobs"), real) {
			return real, nil
		}
	}
	return "", fmt.Errorf("%s: %w", shown, ErrOutsideFolder)
}

// pathCause strips the path from an *fs.PathError, keeping the operation
// and the cause, so that the caller can name the file its own way.
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// realPath is the absolute path of p with every link followed. Its errors
// keep only the cause (fs.ErrNotExist, a permission error, a loop), not a
// path, which could be the target of a link.
func realPath(p string) (string, error) {
	r, err := filepath.EvalSymlinks(p)
	if err == nil {
		r, err = filepath.Abs(r)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, fs.ErrNotExist) {
			err = fs.ErrNotExist
		}
		return "", err
	}
	return r, nil
}

// within reports whether path p lies strictly inside the folder dir (both
// absolute and clean).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && filepath.IsLocal(rel)
}

// ReadFileIn reads the regular file called name in the folder dir, of at
// most maxLen bytes, after checking with ResolveIn that it resolves inside
// the folder. Errors name the file as dir/name.
func ReadFileIn(dir, name string, maxLen int64) ([]byte, error) {
	real, err := ResolveIn(dir, name)
	if err != nil {
		return nil, err
	}
	return readFileMax(real, filepath.Join(dir, name), maxLen)
}
