package weights

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
)

// NamedTensor is a tensor to write with WriteFile: its name, element type,
// shape and little-endian data.
type NamedTensor struct {
	Name  string
	DType graph.DType
	Shape []int
	Data  []byte
}

// WriteFile writes tensors to path as a safetensors file, for tests and
// tools. The output depends only on the arguments: tensors are laid out by
// element size, largest first (so that every tensor is aligned to its element
// size, as the Python library does), and otherwise in the order given; the
// header lists them in the same order after {"__metadata__":{"format":"pt"}}
// and is padded with spaces to a multiple of 8 bytes. Each tensor's Data must
// hold exactly the bytes its dtype and shape call for.
func WriteFile(path string, tensors []NamedTensor) error {
	return WriteFileMetadata(path, tensors, nil)
}

// WriteFileMetadata is WriteFile with more __metadata__ strings beside
// "format" (sorted by key; a "format" in meta replaces "pt").
func WriteFileMetadata(path string, tensors []NamedTensor, meta map[string]string) error {
	return writeFile(path, tensors, meta, nil)
}

// writeFile is WriteFileMetadata telling wrote (when not nil) the bytes of
// each tensor after they are handed to the file; an error wrote returns
// stops the writing, and the file is removed.
func writeFile(path string, tensors []NamedTensor, meta map[string]string, wrote func(n int) error) error {
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		if err := checkNamed(t, seen); err != nil {
			return fmt.Errorf("weights.WriteFile %s: tensor %q: %w", path, t.Name, err)
		}
	}
	order := slices.Clone(tensors)
	slices.SortStableFunc(order, func(a, b NamedTensor) int { return b.DType.Size() - a.DType.Size() })

	var hdr bytes.Buffer
	hdr.WriteString(`{"` + metadataKey + `":{`)
	m := map[string]string{"format": "pt"}
	maps.Copy(m, meta)
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			hdr.WriteByte(',')
		}
		writeJSONString(&hdr, k)
		hdr.WriteByte(':')
		writeJSONString(&hdr, m[k])
	}
	hdr.WriteByte('}')
	off := 0
	for _, t := range order {
		hdr.WriteByte(',')
		writeJSONString(&hdr, t.Name)
		hdr.WriteString(`:{"dtype":"` + stName(t.DType) + `","shape":[`)
		for i, d := range t.Shape {
			if i > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&hdr, `],"data_offsets":[%d,%d]}`, off, off+len(t.Data))
		off += len(t.Data)
	}
	hdr.WriteByte('}')
	for (8+hdr.Len())%8 != 0 {
		hdr.WriteByte(' ')
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var n [8]byte
	for i := range n {
		n[i] = byte(uint64(hdr.Len()) >> (8 * i))
	}
	w.Write(n[:])
	w.Write(hdr.Bytes())
	for _, t := range order {
		w.Write(t.Data)
		if wrote == nil {
			continue
		}
		if err := wrote(len(t.Data)); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
	}
	err = w.Flush() // a bufio.Writer keeps the first write error
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("weights.WriteFile %s: %w", path, err)
	}
	return nil
}

// checkNamed validates one tensor for WriteFile.
func checkNamed(t NamedTensor, seen map[string]bool) error {
	switch {
	case t.Name == "":
		return fmt.Errorf("empty name")
	case t.Name == metadataKey:
		return fmt.Errorf("name is reserved for metadata")
	case !utf8.ValidString(t.Name):
		return fmt.Errorf("name is not valid UTF-8")
	case seen[t.Name]:
		return fmt.Errorf("name appears twice")
	case stName(t.DType) == "":
		return fmt.Errorf("dtype %s cannot be stored in safetensors", t.DType)
	}
	seen[t.Name] = true
	n := 1
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("shape %v has a negative dimension", t.Shape)
		}
		if d != 0 && n > math.MaxInt/d {
			return fmt.Errorf("shape %v: element count overflows", t.Shape)
		}
		n *= d
	}
	if n > math.MaxInt/t.DType.Size() || n*t.DType.Size() != len(t.Data) {
		return fmt.Errorf("shape %v of %s needs %d bytes, have %d", t.Shape, t.DType, n*t.DType.Size(), len(t.Data))
	}
	return nil
}

// writeJSONString writes s as a JSON string without HTML escaping.
func writeJSONString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s)               // cannot fail for a string
	buf.Truncate(buf.Len() - 1) // the newline Encode adds
}

// EncodeF32 returns xs as little-endian float32 bytes, the Data of an F32
// NamedTensor.
func EncodeF32(xs []float32) []byte {
	b := make([]byte, 4*len(xs))
	half.EncodeF32(b, xs)
	return b
}

// EncodeF16 returns xs rounded to IEEE float16 as little-endian bytes, the
// Data of an F16 NamedTensor.
func EncodeF16(xs []float32) []byte {
	b := make([]byte, 2*len(xs))
	half.EncodeF16(b, xs)
	return b
}

// EncodeBF16 returns xs rounded to bfloat16 as little-endian bytes, the Data
// of a BF16 NamedTensor.
func EncodeBF16(xs []float32) []byte {
	b := make([]byte, 2*len(xs))
	half.EncodeBF16(b, xs)
	return b
}
