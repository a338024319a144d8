package weights

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
)

// rawFile assembles a safetensors file from header text and data.
func rawFile(header string, data []byte) []byte {
	return rawFileLen(uint64(len(header)), header, data)
}

// rawFileLen is rawFile with an arbitrary header length field.
func rawFileLen(n uint64, header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, n)
	b = append(b, header...)
	return append(b, data...)
}

// writeTemp writes b to a file called name in a new temporary folder.
func writeTemp(t testing.TB, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// validHeader describes two F32 tensors "a" [2] and "b" [1, 2] over 16 bytes,
// an I64 scalar "c" and an empty BF16 tensor "e".
const validHeader = `{"__metadata__":{"format":"pt"},` +
	`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
	`"b":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]},` +
	`"c":{"dtype":"I64","shape":[],"data_offsets":[16,24]},` +
	`"e":{"dtype":"BF16","shape":[0,3],"data_offsets":[24,24]}}`

func validData() []byte {
	d := EncodeF32([]float32{1, 2, 3, 4})
	return binary.LittleEndian.AppendUint64(d, 42)
}

func TestOpenFileValid(t *testing.T) {
	path := writeTemp(t, "model.safetensors", rawFile(validHeader+"   ", validData()))
	f, err := OpenFile(path)
	require.NoError(t, err)
	defer f.Close()
	assert.True(t, f.Mapped())
	assert.Equal(t, path, f.Path())
	assert.Equal(t, []string{"a", "b", "c", "e"}, f.Names())
	assert.Equal(t, map[string]string{"format": "pt"}, f.Metadata())

	info, err := f.Info("b")
	require.NoError(t, err)
	if diff := cmp.Diff(TensorInfo{Name: "b", DType: graph.F32, Shape: []int{1, 2}, File: path}, info); diff != "" {
		t.Errorf("Info(b) mismatch (-want +got):\n%s", diff)
	}
	assert.Equal(t, 2, info.Len())
	assert.Equal(t, 8, info.NBytes())

	b, err := f.Bytes("b")
	require.NoError(t, err)
	assert.Equal(t, EncodeF32([]float32{3, 4}), b)
	assert.Equal(t, len(b), cap(b), "Bytes must not allow appending into the next tensor")

	c, err := f.Bytes("c")
	require.NoError(t, err)
	assert.Equal(t, uint64(42), binary.LittleEndian.Uint64(c))
	e, err := f.Bytes("e")
	require.NoError(t, err)
	assert.Empty(t, e)

	_, err = f.Bytes("zz")
	assert.ErrorContains(t, err, `no tensor "zz"`)
	_, err = f.Info("zz")
	assert.ErrorContains(t, err, `no tensor "zz"`)

	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "second Close")
	_, err = f.Bytes("a")
	assert.ErrorContains(t, err, "closed")
}

func TestOpenFileNoMetadata(t *testing.T) {
	path := writeTemp(t, "x.safetensors", rawFile(`{"w":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}}`, make([]byte, 6)))
	f, err := OpenFile(path)
	require.NoError(t, err)
	defer f.Close()
	assert.Nil(t, f.Metadata())
	assert.Equal(t, []string{"w"}, f.Names())
}

func TestOpenFileEmpty(t *testing.T) {
	f, err := OpenFile(writeTemp(t, "x.safetensors", rawFile(`{}`, nil)))
	require.NoError(t, err)
	defer f.Close()
	assert.Empty(t, f.Names())
}

func TestParseReadFallback(t *testing.T) {
	// parse works on bytes read into memory, as OpenFile does when mmap fails.
	f, err := parse("mem.safetensors", rawFile(validHeader, validData()))
	require.NoError(t, err)
	assert.False(t, f.Mapped())
	b, err := f.Bytes("a")
	require.NoError(t, err)
	assert.Equal(t, EncodeF32([]float32{1, 2}), b)
	require.NoError(t, f.Close())
}

// overflowWord is in the error for a shape whose size overflows an int; on
// 32-bit systems its dimensions are already too large for an int.
var overflowWord = map[bool]string{true: "overflows", false: "out of range"}[strconv.IntSize == 64]

// badCases are malformed safetensors files with words their error must hold.
var badCases = []struct {
	name string
	file []byte
	want []string
}{
	{"empty file", nil, []string{"too short"}},
	{"seven bytes", make([]byte, 7), []string{"too short"}},
	{"header length 0", rawFileLen(0, "", nil), []string{"header length 0"}},
	{"header length 1", rawFileLen(1, "{", nil), []string{"header length 1"}},
	{"header length 2^40", rawFileLen(1<<40, `{}`, nil), []string{"header length 1099511627776", "limit"}},
	{"header length past end", rawFileLen(100, `{}`, nil), []string{"header length 100", "exceeds"}},
	{"header length max", rawFileLen(^uint64(0), `{}`, nil), []string{"header length"}},
	{"not JSON", rawFile(`{"a":`, nil), []string{"header"}},
	{"array header", rawFile(`[1,2]`, nil), []string{"not a JSON object"}},
	{"string header", rawFile(`"abc"`, nil), []string{"not a JSON object"}},
	{"trailing junk", rawFile(`{} x`, nil), []string{"header"}},
	{"two objects", rawFile(`{}{}`, nil), []string{"after the object"}},
	{"invalid UTF-8", rawFile("{\"\xff\":1}", nil), []string{"UTF-8"}},
	{"duplicate tensor", rawFile(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, make([]byte, 4)),
		[]string{`"a"`, "twice"}},
	{"bad metadata", rawFile(`{"__metadata__":{"x":1}}`, nil), []string{"__metadata__"}},
	{"entry not object", rawFile(`{"w":[1]}`, nil), []string{`tensor "w"`, "not a JSON object"}},
	{"entry null", rawFile(`{"w":null}`, nil), []string{`tensor "w"`, "not a JSON object"}},
	{"missing dtype", rawFile(`{"w":{"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), []string{`tensor "w"`, "missing dtype"}},
	{"missing shape", rawFile(`{"w":{"dtype":"F32","data_offsets":[0,4]}}`, make([]byte, 4)), []string{`tensor "w"`, "missing shape"}},
	{"missing offsets", rawFile(`{"w":{"dtype":"F32","shape":[1]}}`, make([]byte, 4)), []string{`tensor "w"`, "missing data_offsets"}},
	{"unknown dtype", rawFile(`{"w":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 4)),
		[]string{`tensor "w"`, "unknown dtype", "F8_E5M2"}},
	{"lower-case dtype", rawFile(`{"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), []string{`tensor "w"`, "dtype"}},
	{"dtype not string", rawFile(`{"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), []string{`tensor "w"`, "dtype"}},
	{"negative shape", rawFile(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, make([]byte, 4)),
		[]string{`tensor "w"`, "shape[0] = -1", "negative"}},
	{"fractional shape", rawFile(`{"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, make([]byte, 4)),
		[]string{`tensor "w"`, "not an integer"}},
	{"string shape", rawFile(`{"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, make([]byte, 4)),
		[]string{`tensor "w"`, "not an integer"}},
	{"huge shape", rawFile(`{"w":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}}`, make([]byte, 4)),
		[]string{`tensor "w"`, "out of range"}},
	{"shape overflow", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`, nil),
		[]string{`tensor "w"`, "shape", overflowWord}},
	{"byte count overflow", rawFile(`{"w":{"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,0]}}`, nil),
		[]string{`tensor "w"`, "shape", overflowWord}},
	{"shape not array", rawFile(`{"w":{"dtype":"F32","shape":3,"data_offsets":[0,4]}}`, make([]byte, 4)),
		[]string{`tensor "w"`, "shape", "not an array"}},
	{"offsets reversed", rawFile(`{"lm_head.weight":{"dtype":"F32","shape":[0],"data_offsets":[10,8]}}`, make([]byte, 16)),
		[]string{`tensor "lm_head.weight"`, "data_offsets [10, 8]", "begin is after end"}},
	{"offsets past end", rawFile(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 8)),
		[]string{`tensor "w"`, "data_offsets [0, 16]", "past the 8 bytes"}},
	{"offsets far past end", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551608,18446744073709551612]}}`, make([]byte, 8)),
		[]string{`tensor "w"`, "data_offsets", "out of range"}},
	{"negative offset", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, make([]byte, 8)),
		[]string{`tensor "w"`, "data_offsets[0] = -4", "negative"}},
	{"three offsets", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, make([]byte, 8)),
		[]string{`tensor "w"`, "two numbers"}},
	{"shape bytes mismatch", rawFile(`{"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)),
		[]string{`tensor "w"`, "span 8 bytes", "shape [3] of bf16 needs 6"}},
	{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)),
		[]string{`tensor "b"`, `tensor "a"`, "overlap"}},
	{"same range", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)),
		[]string{`"a"`, `"b"`, "overlap"}},
	{"contained", rawFile(`{"big":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}`, make([]byte, 16)),
		[]string{`"big"`, "overlap"}},
}

func TestOpenFileBad(t *testing.T) {
	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			path := writeTemp(t, "model.safetensors", c.file)
			f, err := OpenFile(path)
			if err == nil {
				f.Close()
				t.Fatalf("OpenFile succeeded, want an error containing %q", c.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+":") {
				t.Errorf("error %q does not start with the file name", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestOpenFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenFile(dir)
	assert.ErrorContains(t, err, "not a regular file")
	_, err = OpenFile(filepath.Join(dir, "missing.safetensors"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestWriteFileRoundTrip(t *testing.T) {
	ts := []NamedTensor{
		{Name: "half", DType: graph.F16, Shape: []int{3}, Data: EncodeF16([]float32{1, -2, 0.5})},
		{Name: "w<&>", DType: graph.F32, Shape: []int{2, 2}, Data: EncodeF32([]float32{1, 2, 3, 4})},
		{Name: "bf", DType: graph.BF16, Shape: []int{1}, Data: EncodeBF16([]float32{3})},
		{Name: "ids", DType: graph.I64, Shape: []int{2}, Data: binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 7), 1<<40)},
		{Name: "n", DType: graph.I32, Shape: []int{}, Data: binary.LittleEndian.AppendUint32(nil, 5)},
		{Name: "empty", DType: graph.F32, Shape: []int{0}, Data: nil},
		{Name: "fp8", DType: graph.F8E4M3, Shape: []int{3}, Data: []byte{0x38, 0xfe, 0x01}},
		{Name: "q8", DType: graph.I8, Shape: []int{2}, Data: []byte{0x81, 0x7f}},
		{Name: "q4", DType: graph.U8, Shape: []int{1, 2}, Data: []byte{0x0f, 0xf0}},
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "a.safetensors")
	require.NoError(t, WriteFile(path, ts))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	n := binary.LittleEndian.Uint64(raw)
	assert.Zero(t, (8+n)%8, "header is padded to 8 bytes")
	assert.Contains(t, string(raw[8:8+n]), `"w<&>"`)

	// Deterministic: the same input gives the same bytes.
	path2 := filepath.Join(dir, "b.safetensors")
	require.NoError(t, WriteFile(path2, ts))
	raw2, err := os.ReadFile(path2)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(raw, raw2))

	f, err := OpenFile(path)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, map[string]string{"format": "pt"}, f.Metadata())
	for _, nt := range ts {
		info, err := f.Info(nt.Name)
		require.NoError(t, err)
		assert.Equal(t, nt.DType, info.DType, nt.Name)
		assert.Equal(t, nt.Shape, info.Shape, nt.Name)
		b, err := f.Bytes(nt.Name)
		require.NoError(t, err)
		assert.Equal(t, len(nt.Data), len(b), nt.Name)
		assert.True(t, bytes.Equal(nt.Data, b), nt.Name)
		// Every tensor is aligned to its element size within the file.
		assert.Zero(t, (8+int(n)+offsetIn(raw, b))%nt.DType.Size(), nt.Name)
	}
}

// offsetIn returns where the bytes of sub sit in the data section of the
// file raw, found by content (the test tensors are distinct).
func offsetIn(raw, sub []byte) int {
	n := int(binary.LittleEndian.Uint64(raw))
	if len(sub) == 0 {
		return 0
	}
	return bytes.Index(raw[8+n:], sub)
}

func TestWriteFileBad(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		ts   []NamedTensor
		want string
	}{
		{"size mismatch", []NamedTensor{{Name: "w", DType: graph.F32, Shape: []int{3}, Data: make([]byte, 8)}}, "needs 12 bytes, have 8"},
		{"duplicate", []NamedTensor{{Name: "w", DType: graph.F32, Data: make([]byte, 4)}, {Name: "w", DType: graph.F32, Data: make([]byte, 4)}}, "twice"},
		{"invalid dtype", []NamedTensor{{Name: "w", DType: graph.Invalid}}, "dtype"},
		{"negative", []NamedTensor{{Name: "w", DType: graph.F32, Shape: []int{-1}}}, "negative"},
		{"empty name", []NamedTensor{{DType: graph.F32, Data: make([]byte, 4)}}, "empty name"},
		{"metadata name", []NamedTensor{{Name: metadataKey, DType: graph.F32, Data: make([]byte, 4)}}, "reserved"},
	} {
		err := WriteFile(filepath.Join(dir, c.name), c.ts)
		assert.ErrorContains(t, err, c.want, c.name)
	}
	err := WriteFile(filepath.Join(dir, "no", "such", "dir"), nil)
	assert.Error(t, err)
}
