package weights

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/graph"
)

// File names of a Hugging Face checkpoint folder.
const (
	SingleFile = "model.safetensors"            // the whole checkpoint in one file
	IndexFile  = "model.safetensors.index.json" // weight_map of a sharded checkpoint
)

// Checkpoint is the set of tensors of a checkpoint folder, each held by one
// open safetensors file. Its methods may be called from several goroutines at
// once, but not concurrently with Close.
type Checkpoint struct {
	dir   string
	files []*File          // every file opened, in the order opened
	where map[string]*File // tensor name -> file holding it
	names []string         // sorted
}

// Open opens the checkpoint in the folder dir. It reads, in order of
// preference:
//   - model.safetensors, if present;
//   - model.safetensors.index.json, whose "weight_map" maps each tensor name
//     to the shard file holding it (other tensors in the shards are ignored);
//   - otherwise every *.safetensors file in dir, which must not share tensor
//     names.
//
// Every file is opened through ResolveIn: a file, or a folder on its path,
// may be a symbolic link only to a target inside dir (or inside the blobs
// folder of the Hugging Face cache dir is a snapshot of); only regular files
// are opened, and the index is read up to MaxIndexLen bytes.
//
// The caller must Close the Checkpoint.
func Open(dir string) (*Checkpoint, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("checkpoint %s: not a directory", dir)
	}
	c := &Checkpoint{dir: dir, where: make(map[string]*File)}
	switch {
	case isFile(filepath.Join(dir, SingleFile)):
		err = c.openFiles([]string{SingleFile})
	case isFile(filepath.Join(dir, IndexFile)):
		err = c.openIndex()
	default:
		err = c.openAll()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.names = slices.Sorted(maps.Keys(c.where))
	return c, nil
}

// isFile reports whether path names something other than a folder (a
// dangling link included, so that opening it gives the error).
func isFile(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		_, err = os.Lstat(path)
		return err == nil
	}
	return !st.IsDir()
}

// open opens the file named name in the checkpoint folder and keeps it for
// Close.
func (c *Checkpoint) open(name string) (*File, error) {
	real, err := ResolveIn(c.dir, name)
	if err != nil {
		return nil, err
	}
	f, err := openFile(real, filepath.Join(c.dir, name))
	if err != nil {
		return nil, err
	}
	c.files = append(c.files, f)
	return f, nil
}

// openFiles opens the named files, all of whose tensors belong to the
// checkpoint; a tensor name may appear in only one of them.
func (c *Checkpoint) openFiles(names []string) error {
	for _, name := range names {
		f, err := c.open(name)
		if err != nil {
			return err
		}
		for _, t := range f.names {
			if prev, dup := c.where[t]; dup {
				return fmt.Errorf("checkpoint %s: tensor %q is in both %s and %s",
					c.dir, t, filepath.Base(prev.path), name)
			}
			c.where[t] = f
		}
	}
	return nil
}

// openAll opens every *.safetensors file in the folder.
func (c *Checkpoint) openAll() error {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", c.dir, err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") && e.Type()&fs.ModeDir == 0 {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("checkpoint %s: no %s, %s or *.safetensors file", c.dir, SingleFile, IndexFile)
	}
	return c.openFiles(names) // ReadDir sorts by name
}

// openIndex opens the shards named by the index file.
func (c *Checkpoint) openIndex() error {
	path := filepath.Join(c.dir, IndexFile)
	data, err := ReadFileIn(c.dir, IndexFile, MaxIndexLen)
	if err != nil {
		return err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("%s: no weight_map, or an empty one", path)
	}
	shards := make(map[string]*File)
	for _, shard := range slices.Sorted(maps.Values(idx.WeightMap)) {
		if _, done := shards[shard]; done {
			continue
		}
		if !filepath.IsLocal(shard) {
			return fmt.Errorf("%s: shard %q is not a file inside the checkpoint folder", path, shard)
		}
		f, err := c.open(shard)
		if err != nil {
			return err
		}
		shards[shard] = f
	}
	for _, name := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		shard := idx.WeightMap[name]
		f := shards[shard]
		if !f.Has(name) {
			return fmt.Errorf("%s: weight_map puts tensor %q in shard %s, which lacks it", path, name, shard)
		}
		c.where[name] = f
	}
	return nil
}

// Dir returns the checkpoint's folder, as given to Open.
func (c *Checkpoint) Dir() string { return c.dir }

// Names returns the names of the checkpoint's tensors, sorted.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Has reports whether the checkpoint holds a tensor called name.
func (c *Checkpoint) Has(name string) bool {
	_, ok := c.where[name]
	return ok
}

// file returns the file holding the tensor called name.
func (c *Checkpoint) file(name string) (*File, error) {
	f, ok := c.where[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: no tensor %q", c.dir, name)
	}
	return f, nil
}

// Info describes the tensor called name.
func (c *Checkpoint) Info(name string) (TensorInfo, error) {
	f, err := c.file(name)
	if err != nil {
		return TensorInfo{}, err
	}
	return f.Info(name)
}

// Bytes returns the little-endian data of the tensor called name: a slice of
// the mapped file, which must not be modified and is valid until Close.
func (c *Checkpoint) Bytes(name string) ([]byte, error) {
	f, err := c.file(name)
	if err != nil {
		return nil, err
	}
	return f.Bytes(name)
}

// tensorData returns a tensor's description and bytes.
func (c *Checkpoint) tensorData(name string) (TensorInfo, []byte, error) {
	f, err := c.file(name)
	if err != nil {
		return TensorInfo{}, nil, err
	}
	info, err := f.Info(name)
	if err != nil {
		return TensorInfo{}, nil, err
	}
	b, err := f.Bytes(name)
	return info, b, err
}

// Float32 returns the values of the floating-point tensor called name (F32,
// F16 or BF16) as a new float32 slice, in row-major order.
func (c *Checkpoint) Float32(name string) ([]float32, error) {
	info, b, err := c.tensorData(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, info.Len())
	if !info.DType.DecodeFloats(out, b) {
		return nil, fmt.Errorf("checkpoint %s: tensor %q is %s, not a floating-point type", c.dir, name, info.DType)
	}
	return out, nil
}

// Dense returns the tensor called name as a new gorgonia dense tensor of the
// same shape: float32 for F32, F16 and BF16, int64 for I64 and int32 for I32.
// A scalar (shape []) gives shape (1). Tensors with no elements are an error,
// since gorgonia tensors cannot be empty.
func (c *Checkpoint) Dense(name string) (d *tensor.Dense, err error) {
	info, b, err := c.tensorData(name)
	if err != nil {
		return nil, err
	}
	n := info.Len()
	if n == 0 {
		return nil, fmt.Errorf("checkpoint %s: tensor %q: shape %v has no elements", c.dir, name, info.Shape)
	}
	var backing any
	switch info.DType {
	case graph.F32, graph.F16, graph.BF16:
		backing, err = c.Float32(name)
		if err != nil {
			return nil, err
		}
	case graph.I64:
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		backing = v
	case graph.I32:
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
		backing = v
	default:
		return nil, fmt.Errorf("checkpoint %s: tensor %q: dtype %s has no dense form", c.dir, name, info.DType)
	}
	shape := info.Shape
	if len(shape) == 0 {
		shape = []int{1}
	}
	defer func() {
		if r := recover(); r != nil {
			d, err = nil, fmt.Errorf("checkpoint %s: tensor %q: making a dense tensor of shape %v: %v", c.dir, name, shape, r)
		}
	}()
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(backing)), nil
}

// Expect returns the description of the tensor called name after checking
// that its shape is shape, whatever its dtype. A dimension of -1 in shape
// matches any size.
func (c *Checkpoint) Expect(name string, shape ...int) (TensorInfo, error) {
	info, err := c.Info(name)
	if err != nil {
		return TensorInfo{}, err
	}
	ok := len(info.Shape) == len(shape)
	for i := 0; ok && i < len(shape); i++ {
		ok = shape[i] == -1 || shape[i] == info.Shape[i]
	}
	if !ok {
		return info, fmt.Errorf("checkpoint %s: tensor %q: shape %v, want %v", c.dir, name, info.Shape, shape)
	}
	return info, nil
}

// Summary totals a checkpoint's contents.
type Summary struct {
	Tensors int                   // number of tensors
	Params  int64                 // number of elements over all tensors
	Bytes   map[graph.DType]int64 // data bytes by element type
}

// String gives a one-line account such as
// "12 tensors, 1234567 parameters (f32 4.9 MB, bf16 12 kB)".
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d tensors, %d parameters", s.Tensors, s.Params)
	sep := " ("
	for _, dt := range slices.Sorted(maps.Keys(s.Bytes)) {
		fmt.Fprintf(&b, "%s%s %s", sep, dt, humanBytes(s.Bytes[dt]))
		sep = ", "
	}
	if sep == ", " {
		b.WriteByte(')')
	}
	return b.String()
}

func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.3g %cB", v, "kMGTPE"[i])
}

// Summary counts the checkpoint's tensors, parameters and bytes by dtype.
func (c *Checkpoint) Summary() Summary {
	s := Summary{Tensors: len(c.names), Bytes: make(map[graph.DType]int64)}
	for _, name := range c.names {
		e := c.where[name].tensors[name]
		s.Params += int64(e.info.Len())
		s.Bytes[e.info.DType] += int64(e.end - e.begin)
	}
	return s
}

// Close unmaps every file of the checkpoint. Slices returned by Bytes must not
// be used afterwards. Closing a closed or nil Checkpoint (a model made
// without a file) does nothing.
func (c *Checkpoint) Close() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files = nil
	return errors.Join(errs...)
}
