//go:build !unix

package weights

import (
	"errors"
	"os"
)

// openNoBlock opens path read-only after checking that it names a regular
// file, so that a special file is refused before it is opened.
func openNoBlock(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return os.Open(path)
}
