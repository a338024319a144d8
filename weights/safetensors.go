// Package weights reads model checkpoints: safetensors files, memory-mapped
// and strictly validated, Hugging Face checkpoint folders (single file,
// sharded with an index, or a loose set of files), and config.json files
// with typed, error-reporting getters.
//
// The safetensors format is an 8-byte little-endian header length, a JSON
// header mapping tensor names to dtype, shape and byte offsets, and the raw
// little-endian tensor data. OpenFile checks every offset and size before
// handing out any slice of the data, so a corrupt or hostile file gives an
// error naming the file and the tensor, never a panic or a read outside the
// file.
package weights

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/reel-runtime/reel/graph"
)

// MaxHeaderLen is the largest safetensors JSON header OpenFile accepts, as in
// the reference implementation: 100 MiB.
const MaxHeaderLen = 100 << 20

// metadataKey is the header entry holding free-form string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a checkpoint.
type TensorInfo struct {
	Name  string      // name in the header, e.g. "model.embed_tokens.weight"
	DType graph.DType // element type
	Shape []int       // dimensions, outermost first; empty for a scalar
	File  string      // path of the safetensors file holding the data
}

// Len returns the number of elements: the product of the shape (1 for a
// scalar).
func (t TensorInfo) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// NBytes returns the size of the tensor's data in bytes.
func (t TensorInfo) NBytes() int { return t.Len() * t.DType.Size() }

// stDTypes maps the safetensors dtype names this package accepts to graph
// dtypes.
var stDTypes = map[string]graph.DType{
	"F32":     graph.F32,
	"F16":     graph.F16,
	"BF16":    graph.BF16,
	"I32":     graph.I32,
	"I64":     graph.I64,
	"F8_E4M3": graph.F8E4M3,
	"I8":      graph.I8,
	"U8":      graph.U8,
}

// stName returns the safetensors name of d, or "" if safetensors files read
// by this package cannot hold it.
func stName(d graph.DType) string {
	for name, dt := range stDTypes {
		if dt == d {
			return name
		}
	}
	return ""
}

// entry is a validated header entry: the tensor's description and the range
// of its bytes within the data section.
type entry struct {
	info       TensorInfo
	begin, end int
}

// File is an open safetensors file. Its methods may be called from several
// goroutines at once, but not concurrently with Close.
type File struct {
	path    string
	data    []byte // the whole file, mapped or read
	body    []byte // the data section, after the header
	mapped  bool
	meta    map[string]string
	tensors map[string]entry
	names   []string // sorted
}

// OpenFile opens and validates the safetensors file at path. The file is
// memory-mapped read-only where the system allows it, and read into memory
// otherwise. Only a regular file is opened (see OpenRegular: a FIFO or a
// device is refused without blocking). The caller must Close the File;
// slices returned by Bytes are invalid after that.
//
// A mapped file must not be changed or truncated while it is open: reading
// a page that a truncation removed kills the process (SIGBUS), as with any
// memory-mapped file.
func OpenFile(path string) (*File, error) { return openFile(path, path) }

// openFile is OpenFile of the file at path, named shown in errors and by
// Path.
func openFile(path, shown string) (*File, error) {
	f, size, err := openRegular(path, shown, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size < 8 {
		return nil, fmt.Errorf("%s: %d bytes, too short for a safetensors file (the header length alone is 8)", shown, size)
	}
	if uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("%s: %d bytes, too large to address", shown, size)
	}
	data, err := mmapFile(f, int(size))
	mapped := err == nil
	if !mapped {
		data = make([]byte, size)
		if _, err := io.ReadFull(f, data); err != nil {
			return nil, fmt.Errorf("%s: %w", shown, err)
		}
	}
	sf, err := parse(shown, data)
	if err != nil {
		if mapped {
			munmap(data)
		}
		return nil, err
	}
	sf.mapped = mapped
	return sf, nil
}

// parse validates the safetensors bytes in data, which came from path.
func parse(path string, data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("%s: %d bytes, too short for a safetensors file (the header length alone is 8)", path, len(data))
	}
	n := leUint64(data)
	rest := uint64(len(data) - 8)
	switch {
	case n < 2:
		return nil, fmt.Errorf("%s: header length %d is too short for a JSON object", path, n)
	case n > MaxHeaderLen:
		return nil, fmt.Errorf("%s: header length %d exceeds the limit of %d bytes", path, n, MaxHeaderLen)
	case n > rest:
		return nil, fmt.Errorf("%s: header length %d exceeds the %d bytes that follow it", path, n, rest)
	}
	hdr := data[8 : 8+n]
	sf := &File{
		path:    path,
		data:    data,
		body:    data[8+n:],
		tensors: make(map[string]entry),
	}
	if !utf8.Valid(hdr) {
		return nil, fmt.Errorf("%s: header is not valid UTF-8", path)
	}
	raw, err := headerEntries(hdr)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errors.New("unexpected end of JSON")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	for _, kv := range raw {
		if kv.key == metadataKey {
			if err := json.Unmarshal(kv.val, &sf.meta); err != nil {
				return nil, fmt.Errorf("%s: %s must map strings to strings: %w", path, metadataKey, err)
			}
			continue
		}
		e, err := parseEntry(kv.key, kv.val, len(sf.body))
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", path, kv.key, err)
		}
		e.info.File = path
		sf.tensors[kv.key] = e
		sf.names = append(sf.names, kv.key)
	}
	if err := checkOverlap(sf.tensors); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	slices.Sort(sf.names)
	return sf, nil
}

func leUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

type keyValue struct {
	key string
	val json.RawMessage
}

// headerEntries splits a JSON object into its entries, in order, rejecting
// duplicate keys and anything after the closing brace but white space.
func headerEntries(hdr []byte) ([]keyValue, error) {
	dec := json.NewDecoder(bytes.NewReader(hdr))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []keyValue
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key %v is not a string", tok)
		}
		if seen[key] {
			return nil, fmt.Errorf("tensor %q appears twice", key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		out = append(out, keyValue{key, val})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, fmt.Errorf("after the object: %w", err)
		}
		return nil, fmt.Errorf("unexpected %v after the object", tok)
	}
	return out, nil
}

// parseEntry validates one tensor's header entry against a data section of
// bodyLen bytes.
func parseEntry(name string, val json.RawMessage, bodyLen int) (entry, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(val, &fields); err != nil || fields == nil {
		return entry{}, fmt.Errorf("entry %s is not a JSON object", abbrev(val))
	}
	var dtypeName string
	if v, ok := fields["dtype"]; !ok {
		return entry{}, errors.New("missing dtype")
	} else if err := json.Unmarshal(v, &dtypeName); err != nil {
		return entry{}, fmt.Errorf("dtype %s is not a string", abbrev(v))
	}
	dt, ok := stDTypes[dtypeName]
	if !ok {
		return entry{}, fmt.Errorf("unknown dtype %q (want F32, F16, BF16, F8_E4M3, I8, U8, I32 or I64)", dtypeName)
	}
	shapeRaw, ok := fields["shape"]
	if !ok {
		return entry{}, errors.New("missing shape")
	}
	shape, err := intList(shapeRaw, "shape")
	if err != nil {
		return entry{}, err
	}
	offRaw, ok := fields["data_offsets"]
	if !ok {
		return entry{}, errors.New("missing data_offsets")
	}
	offs, err := intList(offRaw, "data_offsets")
	if err != nil {
		return entry{}, err
	}
	if len(offs) != 2 {
		return entry{}, fmt.Errorf("data_offsets %v: want two numbers [begin, end]", offs)
	}
	nelem := 1
	for _, d := range shape {
		if d != 0 && nelem > math.MaxInt/d {
			return entry{}, fmt.Errorf("shape %v: element count overflows", shape)
		}
		nelem *= d
	}
	size := dt.Size()
	if nelem > math.MaxInt/size {
		return entry{}, fmt.Errorf("shape %v: byte count overflows", shape)
	}
	nbytes := nelem * size
	begin, end := offs[0], offs[1]
	switch {
	case begin > end:
		return entry{}, fmt.Errorf("data_offsets [%d, %d]: begin is after end", begin, end)
	case end > bodyLen:
		return entry{}, fmt.Errorf("data_offsets [%d, %d]: end is past the %d bytes of data", begin, end, bodyLen)
	case end-begin != nbytes:
		return entry{}, fmt.Errorf("data_offsets [%d, %d] span %d bytes, but shape %v of %s needs %d",
			begin, end, end-begin, shape, dt, nbytes)
	}
	return entry{info: TensorInfo{Name: name, DType: dt, Shape: shape}, begin: begin, end: end}, nil
}

// intList parses a JSON array of non-negative integers that fit in an int.
func intList(raw json.RawMessage, what string) ([]int, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil || elems == nil {
		return nil, fmt.Errorf("%s %s is not an array", what, abbrev(raw))
	}
	out := make([]int, len(elems))
	for i, e := range elems {
		s := string(e)
		v, err := strconv.ParseInt(s, 10, strconv.IntSize)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return nil, fmt.Errorf("%s[%d] = %s is out of range", what, i, abbrev(e))
		case err != nil:
			return nil, fmt.Errorf("%s[%d] = %s is not an integer", what, i, abbrev(e))
		case v < 0:
			return nil, fmt.Errorf("%s[%d] = %d is negative", what, i, v)
		}
		out[i] = int(v)
	}
	return out, nil
}

// abbrev returns raw JSON text for an error message, cut short if long.
func abbrev(raw []byte) string {
	const max = 40
	if len(raw) > max {
		return string(raw[:max]) + "..."
	}
	return string(raw)
}

// checkOverlap reports two tensors whose byte ranges intersect. Tensors with
// no bytes overlap nothing.
func checkOverlap(tensors map[string]entry) error {
	es := make([]entry, 0, len(tensors))
	for _, e := range tensors {
		if e.end > e.begin {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end), strings.Compare(a.info.Name, b.info.Name))
	})
	for i := 1; i < len(es); i++ {
		// Sorted by begin, the tensors are disjoint exactly when each begins
		// at or after the end of the one before.
		if prev, cur := es[i-1], es[i]; cur.begin < prev.end {
			return fmt.Errorf("tensor %q: data_offsets [%d, %d] overlap those of tensor %q [%d, %d]",
				cur.info.Name, cur.begin, cur.end, prev.info.Name, prev.begin, prev.end)
		}
	}
	return nil
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Names returns the names of the file's tensors, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Metadata returns the header's __metadata__ strings (nil if there are none).
// The map is a copy.
func (f *File) Metadata() map[string]string {
	return maps.Clone(f.meta)
}

// Has reports whether the file holds a tensor called name.
func (f *File) Has(name string) bool {
	_, ok := f.tensors[name]
	return ok
}

// Info describes the tensor called name.
func (f *File) Info(name string) (TensorInfo, error) {
	e, ok := f.tensors[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("%s: no tensor %q", f.path, name)
	}
	info := e.info
	info.Shape = slices.Clone(info.Shape)
	return info, nil
}

// Bytes returns the little-endian data of the tensor called name: a slice of
// the mapped file, which must not be modified and is valid until Close.
func (f *File) Bytes(name string) ([]byte, error) {
	e, ok := f.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.path, name)
	}
	if f.data == nil {
		return nil, fmt.Errorf("%s: tensor %q: file is closed", f.path, name)
	}
	return f.body[e.begin:e.end:e.end], nil
}

// Mapped reports whether the file's data is memory-mapped rather than read
// into memory.
func (f *File) Mapped() bool { return f.mapped }

// Close releases the file's memory. Slices returned by Bytes must not be used
// afterwards. Closing a closed File does nothing.
func (f *File) Close() error {
	data := f.data
	f.data, f.body = nil, nil
	if data == nil || !f.mapped {
		return nil
	}
	if err := munmap(data); err != nil {
		return fmt.Errorf("%s: unmap: %w", f.path, err)
	}
	return nil
}
