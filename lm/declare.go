package lm

import (
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// A Declared weight is one a model's graphs read: its graph name, the dtype
// and shape the graphs declare it with, and where in the model it is first
// read (the scope of the first node that takes it: "layer 3 / attn").
// Declaring weights in the graphs, and nowhere else, is what keeps a
// model's weight names in one place: the loader checks a checkpoint
// against the declarations of a model's graphs.
type Declared struct {
	Name  string
	DType graph.DType
	Shape []int
	Scope string
}

// Where names the weight for an error: its scope and name.
func (d Declared) Where() string {
	if d.Scope == "" {
		return "tensor " + d.Name
	}
	return d.Scope + ": tensor " + d.Name
}

// scoped prefixes err with the weight's scope, when it has one: for an
// error that names the tensor it is about.
func (d Declared) scoped(err error) error {
	if d.Scope == "" {
		return err
	}
	return fmt.Errorf("%s: %w", d.Scope, err)
}

// Declarations lists the weights the graphs declare, each once, in the
// order they are first declared. A name declared twice with another dtype
// or shape is an error naming both.
func Declarations(gs ...*graph.Graph) ([]Declared, error) {
	var out []Declared
	seen := map[string]int{}
	for _, g := range gs {
		scope := map[*graph.Value]string{}
		for _, n := range g.Nodes {
			for _, in := range n.Inputs {
				if _, ok := scope[in]; !ok && in.Kind == graph.Weight {
					scope[in] = n.Scope
				}
			}
		}
		for _, v := range g.Values {
			if v.Kind != graph.Weight {
				continue
			}
			if i, ok := seen[v.Name]; ok {
				if d := out[i]; d.DType != v.DType || !graph.Shape(d.Shape).Equal(v.Shape) {
					return nil, fmt.Errorf("weight %s declared as %s%v and as %s%v", v.Name, d.DType, d.Shape, v.DType, v.Shape)
				}
				continue
			}
			seen[v.Name] = len(out)
			out = append(out, Declared{Name: v.Name, DType: v.DType, Shape: slices.Clone(v.Shape), Scope: scope[v]})
		}
	}
	return out, nil
}

// Parameters counts the elements of the declared weights.
func Parameters(decl []Declared) int {
	n := 0
	for _, d := range decl {
		n += Tensor{Shape: d.Shape}.Len()
	}
	return n
}

// StoredDType gives a weight's dtype as the checkpoint stores it, for
// graphs built to read matrices as stored (the codes of a quantized
// matrix: f8_e4m3, i8, u8; see Stored). A name the checkpoint lacks, or
// stores in a dtype no weight has, gets f32, so that the graph builds and
// LoadWeights names the tensor (missing, or of a dtype it cannot read).
func StoredDType(ck *weights.Checkpoint) func(name string) graph.DType {
	return func(name string) graph.DType {
		info, err := ck.Info(name)
		if err != nil || !info.DType.IsFloat() && !info.DType.IsQuantized() {
			return graph.F32
		}
		return info.DType
	}
}

// Load reads the checkpoint folder dir as a model of arch: its
// config.json with config (which checks the model_type and every field)
// and how its matrices are stored for a load quantizing them in the format
// of quant (ReadStored; "": as stored), then its tensors with load. When
// load fails the checkpoint is closed again and the error names arch and
// the folder.
func Load[C, M any](dir, arch, quant string, config func(*weights.Config) (C, error), load func(C, Stored, *weights.Checkpoint) (M, error)) (M, error) {
	var none M
	cfg, err := weights.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return none, err
	}
	c, err := config(cfg)
	if err != nil {
		return none, err
	}
	st, err := ReadStored(cfg, quant)
	if err != nil {
		return none, err
	}
	ck, err := weights.Open(dir)
	if err != nil {
		return none, err
	}
	m, err := load(c, st, ck)
	if err != nil {
		ck.Close()
		return none, fmt.Errorf("%s %s: %w", arch, dir, err)
	}
	return m, nil
}

// LoadOptions say how a checkpoint's tensors become a model's weights.
type LoadOptions struct {
	// Name, when not nil and not "", is the checkpoint's name of a declared
	// weight (a checkpoint that nests the model under a prefix of its own,
	// say); the errors still name the declaration.
	Name func(declared string) string
	// Make, when it returns true, makes the weight of a declaration itself
	// (stacked, folded, from several tensors) instead of reading the
	// checkpoint tensor of the same name; reads names the tensors it used.
	// Its errors come back prefixed with the weight's scope only, so they
	// name the tensor they are about (the one missing, say). With Quant, a
	// declaration of codes the checkpoint has no tensor of is also asked
	// for: a float tensor made for it (per-expert matrices stacked) is
	// quantized.
	Make func(d Declared, ck *weights.Checkpoint) (t Tensor, reads []string, ok bool, err error)
	// Unused says a checkpoint tensor may be left unread (a buffer of
	// precomputed rotary frequencies, say); every other tensor the
	// declarations do not read is an error.
	Unused func(name string) bool
	// Fold, when not nil for a weight declared f32, is applied to its
	// values after they are read in f32 (a scale folded at load).
	Fold func(name string) func(x []float32)
	// Quant, when set, is the format of the weights declared quantized in
	// it (Stored.QuantizeFloat) that the checkpoint stores in a float
	// type: they are quantized at load, and their declared scales made
	// with them.
	Quant Quant
	// Format, when set, is the format of the matrices the checkpoint
	// stores quantized (its quantization_config). A stack of Format's
	// codes [E, rows, cols] that Make makes of codes stored one by one
	// (StackExperts; its reads are then the E experts' matrices in order,
	// the same number each, their rows stacked) gets its declared scales
	// made by LoadWeights of the matrices' own (Quant.ScaleName of each),
	// stacked the same way: one table per expert.
	Format Quant
}

// LoadWeights reads the declared weights from a checkpoint. A weight is the
// tensor of its name, of the declared shape; declared in the checkpoint's
// dtype it is the file's bytes (mapped, no copy), declared f32 it is read
// and converted (a norm's scale stored in bf16, say); the codes of a
// quantized matrix are read as stored, or made from a float matrix with
// its scales (LoadOptions.Quant). The errors name the weight's scope and
// the tensor: missing, misshaped, of a dtype that cannot be read as
// declared, and tensors of the checkpoint that no declaration reads.
func LoadWeights(ck *weights.Checkpoint, decl []Declared, o LoadOptions) (Tensors, error) {
	ts := Tensors{}
	read := map[string]bool{}
	made, err := quantizeDeclared(ck, decl, o, read)
	if err != nil {
		return nil, err
	}
	if made == nil {
		made = map[string]Tensor{}
	}
	if err := stackDeclared(ck, decl, o, read, made); err != nil {
		return nil, err
	}
	for _, d := range decl {
		if t, ok := made[d.Name]; ok {
			if err := checkMade(d, t); err != nil {
				return nil, err
			}
			ts[d.Name] = t
			continue
		}
		if o.Make != nil {
			t, reads, ok, err := o.Make(d, ck)
			if err != nil {
				return nil, d.scoped(err)
			}
			if ok {
				if err := checkMade(d, t); err != nil {
					return nil, err
				}
				for _, r := range reads {
					read[r] = true
				}
				ts[d.Name] = t
				continue
			}
		}
		name := d.Name
		if o.Name != nil {
			if n := o.Name(d.Name); n != "" {
				name = n
			}
		}
		info, err := ck.Info(name)
		if err != nil {
			return nil, fmt.Errorf("%s: missing from the checkpoint", d.Where())
		}
		read[name] = true
		if !slices.Equal(info.Shape, d.Shape) {
			return nil, fmt.Errorf("%s: shape %v, want %v", d.Where(), info.Shape, d.Shape)
		}
		if info.DType.IsQuantized() || d.DType.IsQuantized() {
			// Codes are read as stored, never converted.
			if info.DType != d.DType {
				return nil, fmt.Errorf("%s: stored as %s, declared %s", d.Where(), info.DType, d.DType)
			}
			data, err := ck.Bytes(name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Where(), err)
			}
			ts[d.Name] = Tensor{DType: info.DType, Shape: d.Shape, Data: data}
			continue
		}
		if !info.DType.IsFloat() {
			return nil, fmt.Errorf("%s: dtype %s, want f32, f16 or bf16", d.Where(), info.DType)
		}
		var fold func([]float32)
		if o.Fold != nil {
			fold = o.Fold(d.Name)
		}
		switch {
		case d.DType == info.DType && fold == nil:
			data, err := ck.Bytes(name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Where(), err)
			}
			ts[d.Name] = Tensor{DType: info.DType, Shape: d.Shape, Data: data}
		case d.DType == graph.F32:
			v, err := ck.Float32(name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Where(), err)
			}
			if fold != nil {
				fold(v)
			}
			ts[d.Name] = F32Tensor(v, d.Shape...)
		default:
			return nil, fmt.Errorf("%s: stored as %s, declared %s", d.Where(), info.DType, d.DType)
		}
	}
	var extra []string
	for _, n := range ck.Names() {
		if !read[n] && (o.Unused == nil || !o.Unused(n)) {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		more := ""
		if len(extra) > 5 {
			more = fmt.Sprintf(" and %d more", len(extra)-5)
			extra = extra[:5]
		}
		return nil, fmt.Errorf("checkpoint %s: tensors the model does not read: %s%s", ck.Dir(), strings.Join(extra, ", "), more)
	}
	return ts, nil
}

// StackExperts makes the weight d of a mixture of experts, [experts,
// rows, cols], from the tensors a checkpoint stores per expert (for
// LoadOptions.Make): parts(e) names expert e's, whose rows are stacked in
// that order (gate then up, say), each [rows/len(parts), cols] in d's
// dtype: a float type, or the codes of a format, as stored (an FP8
// checkpoint's per-expert float8_e4m3fn matrices; LoadWeights stacks
// their scales: LoadOptions.Format). When d is codes quantized at load
// (LoadOptions.Quant), expert 0's first part stored in a float type, the
// stack is the float one they are made of: its dtype and cols are that
// part's. Every expert's tensors are checked before the stack is made: a
// router of many experts over a few stored must not allocate for all. It
// returns the names it read.
func StackExperts(ck *weights.Checkpoint, d Declared, parts func(e int) []string) (Tensor, []string, error) {
	if len(d.Shape) != 3 {
		return Tensor{}, nil, fmt.Errorf("tensor %s: a stack of experts is [experts, rows, cols], not %v", d.Name, d.Shape)
	}
	dt, shape := d.DType, slices.Clone(d.Shape)
	if names := parts(0); dt.IsQuantized() && len(names) > 0 {
		if info, err := ck.Info(names[0]); err == nil && len(info.Shape) == 2 && info.DType.IsFloat() {
			dt, shape[2] = info.DType, info.Shape[1]
		}
	}
	var reads []string
	for e := range d.Shape[0] {
		names := parts(e)
		part := []int{shape[1] / max(len(names), 1), shape[2]}
		for _, n := range names {
			info, err := ck.Info(n)
			switch {
			case err != nil:
				return Tensor{}, nil, fmt.Errorf("tensor %s: missing from the checkpoint", n)
			case !slices.Equal(info.Shape, part):
				return Tensor{}, nil, fmt.Errorf("tensor %s: shape %v, want %v", n, info.Shape, part)
			case !info.DType.IsFloat() && !info.DType.IsQuantized():
				return Tensor{}, nil, fmt.Errorf("tensor %s: dtype %s, want f32, f16, bf16 or a format's codes", n, info.DType)
			case info.DType != dt:
				return Tensor{}, nil, fmt.Errorf("tensor %s: dtype %s, but expert 0 is %s: experts are stacked in one dtype", n, info.DType, dt)
			}
			reads = append(reads, n)
		}
	}
	t := Tensor{DType: dt, Shape: shape}
	t.Data = make([]byte, 0, t.Len()*dt.Size())
	for _, n := range reads {
		data, err := ck.Bytes(n)
		if err != nil {
			return Tensor{}, nil, fmt.Errorf("tensor %s: %w", n, err)
		}
		t.Data = append(t.Data, data...)
	}
	return t, reads, nil
}

// stackDeclared makes, for a checkpoint stored quantized in o.Format,
// each stack of codes that Make makes of codes stored one by one (experts)
// and the stack of their scales (stackScales); made gets both by declared
// name, and read the tensors they were made of.
func stackDeclared(ck *weights.Checkpoint, decl []Declared, o LoadOptions, read map[string]bool, made map[string]Tensor) error {
	q := o.Format
	if o.Make == nil || q.DType() == graph.Invalid {
		return nil
	}
	scales := map[string]Declared{}
	for _, d := range decl {
		scales[d.Name] = d
	}
	for _, d := range decl {
		sd, ok := scales[q.ScaleName(d.Name)]
		if _, done := made[d.Name]; done || !ok || d.DType != q.DType() || len(d.Shape) != 3 {
			continue
		}
		t, reads, ok, err := o.Make(d, ck)
		if err != nil {
			return d.scoped(err)
		}
		if !ok || t.DType != d.DType {
			continue // read as stored, or named by LoadWeights
		}
		sc, sreads, err := q.stackScales(ck, d, sd, reads)
		if err != nil {
			return sd.scoped(err)
		}
		made[d.Name], made[sd.Name] = t, sc
		for _, r := range append(reads, sreads...) {
			read[r] = true
		}
	}
	return nil
}

// stackScales makes the scales sd of the stack of codes d that a
// LoadOptions.Make made of the codes parts (d.Shape[0] experts' matrices in
// order, the same number each, their rows stacked): each matrix's table of
// scales (ScaleName), [⌈rows/R⌉, ⌈in/C⌉] for its codes [rows, cols], the
// tables of an expert's matrices one after the other, as its codes are.
// So that the blocks of a matrix are the stack's, every matrix but an
// expert's last must fill whole blocks of rows (an FP8 checkpoint's gate
// and up projections stacked in one, moe_intermediate_size a multiple of
// the block's 128 rows). A table stored in another float type than sd's
// f32 is converted (exactly). Every table is checked before the stack is
// made; the errors name the tensor. It returns the names it read.
func (q Quant) stackScales(ck *weights.Checkpoint, d, sd Declared, parts []string) (Tensor, []string, error) {
	e := d.Shape[0]
	if len(sd.Shape) != 3 || sd.Shape[0] != e || e < 1 || len(parts) == 0 || len(parts)%e != 0 || q.BlockRows < 1 {
		return Tensor{}, nil, fmt.Errorf("tensor %s: the scales %s%v of a stack of %d experts made of %d tensors in %s", sd.Name, sd.DType, sd.Shape, e, len(parts), q)
	}
	per, rows := len(parts)/e, 0
	var reads []string
	for i, n := range parts {
		info, err := ck.Info(n)
		if err != nil {
			return Tensor{}, nil, fmt.Errorf("tensor %s: missing from the checkpoint", n)
		}
		if len(info.Shape) != 2 {
			return Tensor{}, nil, fmt.Errorf("tensor %s: shape %v: the codes of a matrix have two dimensions", n, info.Shape)
		}
		if i%per != per-1 && info.Shape[0]%q.BlockRows != 0 {
			return Tensor{}, nil, fmt.Errorf("tensor %s: %d rows, not a multiple of the scale blocks' %d (%s): its scales cannot be stacked with those of %s into one table",
				n, info.Shape[0], q.BlockRows, q, parts[i+1])
		}
		sn := q.ScaleName(n)
		want := []int{(info.Shape[0] + q.BlockRows - 1) / q.BlockRows, sd.Shape[2]}
		si, err := ck.Info(sn)
		switch {
		case err != nil:
			return Tensor{}, nil, fmt.Errorf("tensor %s: missing from the checkpoint (the scales of %s, stored %s)", sn, n, q)
		case !slices.Equal(si.Shape, want):
			return Tensor{}, nil, fmt.Errorf("tensor %s: shape %v, want %v (blocks of %dx%d over %s's codes %v)", sn, si.Shape, want, q.BlockRows, q.BlockCols, n, info.Shape)
		case !si.DType.IsFloat() || si.DType != sd.DType && sd.DType != graph.F32:
			return Tensor{}, nil, fmt.Errorf("tensor %s: dtype %s, want %s", sn, si.DType, sd.DType)
		}
		if rows += want[0]; i%per == per-1 {
			if rows != sd.Shape[1] {
				return Tensor{}, nil, fmt.Errorf("tensor %s: expert %d's scales have %d rows of blocks, want %d", sd.Name, i/per, rows, sd.Shape[1])
			}
			rows = 0
		}
		reads = append(reads, sn)
	}
	t := Tensor{DType: sd.DType, Shape: slices.Clone(sd.Shape)}
	t.Data = make([]byte, 0, t.Len()*t.DType.Size())
	for _, n := range reads {
		data, err := readAs(ck, n, t.DType)
		if err != nil {
			return Tensor{}, nil, fmt.Errorf("tensor %s: %w", n, err)
		}
		t.Data = append(t.Data, data...)
	}
	return t, reads, nil
}

// readAs is the bytes of the checkpoint's float tensor name in dtype dt:
// as stored, or converted to f32.
func readAs(ck *weights.Checkpoint, name string, dt graph.DType) ([]byte, error) {
	info, err := ck.Info(name)
	if err != nil || info.DType == dt {
		return ck.Bytes(name)
	}
	v, err := ck.Float32(name)
	if err != nil {
		return nil, err
	}
	return F32Tensor(v).Data, nil
}

func checkMade(d Declared, t Tensor) error {
	if t.DType != d.DType || !slices.Equal(t.Shape, d.Shape) {
		return fmt.Errorf("%s: made as %s%v, declared %s%v", d.Where(), t.DType, t.Shape, d.DType, d.Shape)
	}
	if len(t.Data) != t.Len()*t.DType.Size() {
		return fmt.Errorf("%s: made with %d bytes for %s%v", d.Where(), len(t.Data), t.DType, t.Shape)
	}
	return nil
}

// Synthesize makes random weights for declarations, as a synthetic model
// of a known shape needs: a weight of two or more dimensions is uniform
// with the variance of 1/fan-in, in its declared dtype; a vector (declared
// f32) takes vector(d, j, u) for its element j, u uniform on [0, 1) (nil:
// ones). Each weight's numbers come from seed and its place in decl, so the
// same declarations give the same weights. progress (when not nil) is told
// the bytes made after each weight (a released model's gigabytes take a
// minute on two cores).
func Synthesize(decl []Declared, seed uint64, vector func(d Declared, j int, u float64) float32, progress Progress) (Tensors, error) {
	return synthesize(decl, seed, vector, progress, false)
}

// SynthesizeDeferred is Synthesize with the weights of two or more
// dimensions left to be made where they are uploaded: each a Tensor with
// no bytes and the ops.Random of Synthesize's, which a backend makes in
// its own memory (Tensors.Upload), so that the host never holds them (a
// released model's hundred gigabytes, made on the GPU in seconds). The
// vectors are made now, as Synthesize makes them. Uploaded, the weights
// are Synthesize's, byte for byte, and QuantizeTensors quantizes them (in
// their descriptions) as it quantizes Synthesize's.
func SynthesizeDeferred(decl []Declared, seed uint64, vector func(d Declared, j int, u float64) float32) (Tensors, error) {
	return synthesize(decl, seed, vector, nil, true)
}

// synthesize makes Synthesize's weights, the matrices deferred to upload
// when deferred is set.
func synthesize(decl []Declared, seed uint64, vector func(d Declared, j int, u float64) float32, progress Progress, deferred bool) (Tensors, error) {
	ts := Tensors{}
	size := func(d Declared) int64 { return int64(Tensor{Shape: d.Shape}.Len() * d.DType.Size()) }
	var total, done int64
	for _, d := range decl {
		total += size(d)
	}
	for i, d := range decl {
		progress.report(done, total)
		done += size(d)
		stream := seed*0x9e3779b97f4a7c15 + uint64(i)
		if len(d.Shape) >= 2 {
			// Uniform on [-a, a] has variance a²/3: a = √(3 / fan-in).
			a := float32(math.Sqrt(3 / float64(max(1, d.Shape[len(d.Shape)-1]))))
			if deferred {
				r := &ops.Random{Stream: stream, Scale: a, Float: d.DType, Shape: slices.Clone(d.Shape)}
				if err := r.Check(); err != nil || d.DType != graph.F32 && d.DType != graph.BF16 {
					return nil, fmt.Errorf("%s: synthetic weights in %s%v: want f32 or bf16", d.Where(), d.DType, d.Shape)
				}
				ts[d.Name] = Tensor{DType: d.DType, Shape: slices.Clone(d.Shape), Random: r}
				continue
			}
			t, err := RandomUniform(d.DType, a, stream, d.Shape...)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.Where(), err)
			}
			ts[d.Name] = t
			continue
		}
		if d.DType != graph.F32 {
			return nil, fmt.Errorf("%s: a synthetic vector is f32, not %s", d.Where(), d.DType)
		}
		v := make([]float32, Tensor{Shape: d.Shape}.Len())
		for j := range v {
			v[j] = 1
			if vector != nil {
				v[j] = vector(d, j, UnitUniform(stream, uint64(j)))
			}
		}
		ts[d.Name] = F32Tensor(v, d.Shape...)
	}
	progress.report(total, total)
	return ts, nil
}

// quantizeDeclared quantizes, for LoadOptions.Quant, the declared weights
// of its codes' dtype that the checkpoint stores in a float type, giving
// their codes and scales by declared name; it marks the tensors it reads.
func quantizeDeclared(ck *weights.Checkpoint, decl []Declared, o LoadOptions, read map[string]bool) (map[string]Tensor, error) {
	if o.Quant.Method == "" {
		return nil, nil
	}
	return quantizeMatrices(decl, o.Quant, nil, func(d Declared) (Tensor, bool, error) {
		name := d.Name
		if o.Name != nil {
			if n := o.Name(d.Name); n != "" {
				name = n
			}
		}
		info, err := ck.Info(name)
		if err != nil && o.Make != nil {
			// Made of other tensors (experts stored one by one, stacked):
			// a float matrix made for the codes is quantized here.
			t, reads, ok, err := o.Make(d, ck)
			if err != nil || !ok || !t.DType.IsFloat() {
				return Tensor{}, false, nil // made again, and its error or dtype named, by LoadWeights
			}
			for _, r := range reads {
				read[r] = true
			}
			return t, true, nil
		}
		if err != nil || !info.DType.IsFloat() {
			return Tensor{}, false, nil // read as stored, or named missing, by LoadWeights
		}
		data, err := ck.Bytes(name)
		if err != nil {
			return Tensor{}, false, err
		}
		read[name] = true
		return Tensor{DType: info.DType, Shape: info.Shape, Data: data}, true, nil
	})
}

// QuantizeTensors quantizes in q's format the weights of ts that graphs
// built with Stored.QuantizeFloat declare quantized (decl: their
// declarations) and that ts holds in a float type: what LoadWeights does
// at load with LoadOptions.Quant, for weights made without a checkpoint
// (a synthetic model's). It returns the weights with each such matrix
// replaced by its codes and its scales added beside it (Quant.ScaleName);
// every other weight is kept as it is, and ts is not changed. progress
// (when not nil) is told the bytes of the float matrices quantized. A
// matrix whose shape does not give its declared codes, or that does not
// quantize (a non-finite weight), is an error naming it.
func QuantizeTensors(ts Tensors, decl []Declared, q Quant, progress Progress) (Tensors, error) {
	if q.DType() == graph.Invalid {
		return nil, fmt.Errorf("quantize in %s: not a format", q)
	}
	made, err := quantizeMatrices(decl, q, progress, func(d Declared) (Tensor, bool, error) {
		t, ok := ts[d.Name]
		return t, ok && t.DType.IsFloat() && t.Random == nil, nil
	})
	if err != nil {
		return nil, err
	}
	out := make(Tensors, len(ts)+len(made)/2)
	maps.Copy(out, ts)
	maps.Copy(out, made)
	for _, d := range decl {
		t, ok := ts[d.Name]
		if !ok || t.Random == nil || d.DType != q.DType() || len(d.Shape) != 2 && len(d.Shape) != 3 {
			continue
		}
		codes, scales, err := q.quantizeRandom(*t.Random)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Where(), err)
		}
		if !slices.Equal(codes.Shape, d.Shape) {
			return nil, fmt.Errorf("%s: shape %v does not make codes %v in %s", d.Where(), t.Shape, d.Shape, q)
		}
		out[d.Name], out[q.ScaleName(d.Name)] = codes, scales
	}
	return out, nil
}

// quantizeRandom gives the codes and scales of the synthetic float matrix
// r describes quantized in q's format: their descriptions, which make
// the bytes Quantize makes of r's (ops.Random).
func (q Quant) quantizeRandom(r ops.Random) (codes, scales Tensor, err error) {
	if r.Quantized() || len(r.Shape) != 2 && len(r.Shape) != 3 {
		return Tensor{}, Tensor{}, fmt.Errorf("quantize a random %s%v: want a float matrix, or a stack of them", r.DType(), r.MadeShape())
	}
	r.Codes, r.Blocks, r.ScaleType = q.DType(), q.Attrs(), q.ScaleDType()
	if err := r.Check(); err != nil {
		return Tensor{}, Tensor{}, fmt.Errorf("quantize in %s: %w", q, err)
	}
	s := r
	s.Scales = true
	return Tensor{DType: r.DType(), Shape: r.MadeShape(), Random: &r}, Tensor{DType: s.DType(), Shape: s.MadeShape(), Random: &s}, nil
}

// quantizeMatrices quantizes the declared matrices of q's codes' dtype
// that source gives in a float type (ok false: none to quantize), giving
// their codes and scales by declared name; progress is told the bytes of
// the float matrices done.
func quantizeMatrices(decl []Declared, q Quant, progress Progress, source func(Declared) (Tensor, bool, error)) (map[string]Tensor, error) {
	type job struct {
		d Declared
		t Tensor
	}
	var jobs []job
	var total, done int64
	for _, d := range decl {
		if d.DType != q.DType() || len(d.Shape) != 2 && len(d.Shape) != 3 {
			continue
		}
		t, ok, err := source(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Where(), err)
		}
		if !ok {
			continue
		}
		if n := len(d.Shape); len(t.Shape) != n || !slices.Equal(t.Shape[:n-1], d.Shape[:n-1]) || ops.QuantCols(d.DType, t.Shape[n-1]) != d.Shape[n-1] {
			return nil, fmt.Errorf("%s: shape %v does not make codes %v in %s", d.Where(), t.Shape, d.Shape, q)
		}
		jobs = append(jobs, job{d, t})
		total += int64(len(t.Data))
	}
	made := map[string]Tensor{}
	progress.report(0, total)
	for _, j := range jobs {
		codes, scales, err := q.Quantize(j.t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", j.d.Where(), err)
		}
		made[j.d.Name], made[q.ScaleName(j.d.Name)] = codes, scales
		done += int64(len(j.t.Data))
		progress.report(done, total)
	}
	return made, nil
}
