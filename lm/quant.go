package lm

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// Quant is a format of quantized matrices: how a checkpoint stores them
// (its config.json quantization_config), or how LoadWeights quantizes
// matrices a checkpoint stores in a float type. A quantized matrix W
// [out, in] is two tensors: W's codes under its own name and the scales of
// its blocks beside it (ScaleName), and a product with it is
// ops.QuantMatMul. The formats:
//
//   - "fp8", FP8 checkpoints as published (DeepSeek-V3, Qwen3-FP8):
//     {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]};
//     codes float8_e4m3fn [out, in] (safetensors F8_E4M3), scales
//     <name>_scale_inv float32 [⌈out/128⌉, ⌈in/128⌉]; W = code · scale. Only
//     weights are quantized: activations stay f32 (activation_scheme
//     "dynamic", the published one, is accepted and means nothing more).
//   - "q8": {"quant_method": "q8", "bits": 8, "group_size": 32}; codes int8
//     [out, in] (I8), scales <name>_scale float16 [out, ⌈in/32⌉]; W = code ·
//     scale, codes in -127..127 (symmetric: scale = max|w| / 127).
//   - "q4": {"quant_method": "q4", "bits": 4, "group_size": 32}; codes two
//     a byte, uint8 [out, ⌈in/2⌉] (U8), element 2j in the low nibble and
//     2j+1 in the high one, a nibble u meaning u − 8; scales <name>_scale
//     float16 [out, ⌈in/32⌉]; W = (u − 8) · scale. Symmetric, with no zero
//     point: the weights of a trained linear layer are centred on zero
//     within a group, so a zero point buys little, and without one a decode
//     product is one multiply per group, reads one tensor less (a group of
//     32 is 16 bytes of codes and a 2-byte scale: 4.5 bits a weight) and
//     dequantizes with one subtraction. The scale maps the group's largest
//     magnitude to -8 (the code with no positive twin), as GGML's Q4_0
//     does, so all 16 codes are used.
//
// Group sizes other than 32 are read as the config says (64 and 128 too).
type Quant struct {
	// Method is "fp8", "q8" or "q4"; "" for none.
	Method string
	// BlockRows, BlockCols are the scale blocks (fp8: weight_block_size;
	// q8, q4: 1 x group_size).
	BlockRows, BlockCols int
}

// The formats' names, as quantization_config's quant_method and the
// --quant flag spell them.
const (
	QuantFP8 = "fp8"
	QuantQ8  = "q8"
	QuantQ4  = "q4"
)

// maxQuantBlock bounds a format's block sides.
const maxQuantBlock = 1 << 16

// DefaultQuant is the format of a method as LoadWeights quantizes and
// reel quantize writes it: fp8 in 128 x 128 blocks as published, q8 and q4
// in groups of 32.
func DefaultQuant(method string) (Quant, error) {
	switch method {
	case QuantFP8:
		return Quant{Method: method, BlockRows: 128, BlockCols: 128}, nil
	case QuantQ8, QuantQ4:
		return Quant{Method: method, BlockRows: 1, BlockCols: 32}, nil
	}
	return Quant{}, fmt.Errorf("quantization %q: want fp8, q8 or q4", method)
}

// QuantizeTo gives the format to quantize weights stored in have's (a
// checkpoint's quantization_config, or a model's) in, for a --quant of
// quant: ok is false when there is nothing to do (quant is "" or have's
// own format). Weights stored quantized in another format, and a format
// that is not one, are errors naming the flag; what names the weights'
// holder in them ("checkpoint", "model").
func QuantizeTo(have Quant, quant, what string) (q Quant, ok bool, err error) {
	if quant == "" || quant == have.Method {
		return have, false, nil
	}
	if have.Method != "" {
		return have, false, fmt.Errorf("--quant %s: the %s is stored quantized in %s", quant, what, have.Method)
	}
	if q, err = DefaultQuant(quant); err != nil {
		return have, false, fmt.Errorf("--quant: %w", err)
	}
	return q, true, nil
}

// ReadQuant reads a config's quantization_config: the zero Quant when it
// has none. Every error names the field.
func ReadQuant(cfg *weights.Config) (Quant, error) {
	const f = "quantization_config"
	if !cfg.Has(f) || cfg.IsNull(f) {
		return Quant{}, nil
	}
	g := cfg.Get()
	method := g.String(f+".quant_method", "")
	if err := g.Err(); err != nil {
		return Quant{}, err
	}
	q, err := DefaultQuant(method)
	if err != nil {
		return Quant{}, fmt.Errorf("%s: %s.quant_method: %w", cfg.Path(), f, err)
	}
	switch method {
	case QuantFP8:
		fmtName := g.String(f+".fmt", "e4m3")
		act := g.String(f+".activation_scheme", "dynamic")
		if err := g.Err(); err != nil {
			return Quant{}, err
		}
		if fmtName != "e4m3" {
			return Quant{}, fmt.Errorf("%s: %s.fmt %q: only e4m3 (float8_e4m3fn) is read", cfg.Path(), f, fmtName)
		}
		if act != "dynamic" {
			return Quant{}, fmt.Errorf("%s: %s.activation_scheme %q: only dynamic is read (activations stay f32)", cfg.Path(), f, act)
		}
		bs, err := cfg.Ints(f + ".weight_block_size")
		if err != nil {
			return Quant{}, err
		}
		if len(bs) != 2 || bs[0] < 1 || bs[1] < 1 || bs[0] > maxQuantBlock || bs[1] > maxQuantBlock {
			return Quant{}, fmt.Errorf("%s: %s.weight_block_size %v: want two block sides in 1..%d (per-tensor scales are not read)",
				cfg.Path(), f, bs, maxQuantBlock)
		}
		q.BlockRows, q.BlockCols = bs[0], bs[1]
	default:
		bits := 8
		if method == QuantQ4 {
			bits = 4
		}
		if b := g.Int(f+".bits", bits); b != bits && g.Err() == nil {
			return Quant{}, fmt.Errorf("%s: %s.bits %d: %s has %d", cfg.Path(), f, b, method, bits)
		}
		q.BlockCols = g.IntIn(f+".group_size", 32, 1, maxQuantBlock)
		if err := g.Err(); err != nil {
			return Quant{}, err
		}
	}
	return q, nil
}

// Config is the quantization_config a checkpoint of the format carries
// (nil for none), as ReadQuant reads it back.
func (q Quant) Config() map[string]any {
	switch q.Method {
	case QuantFP8:
		return map[string]any{"quant_method": q.Method, "fmt": "e4m3", "activation_scheme": "dynamic",
			"weight_block_size": []int{q.BlockRows, q.BlockCols}}
	case QuantQ8, QuantQ4:
		bits := 8
		if q.Method == QuantQ4 {
			bits = 4
		}
		return map[string]any{"quant_method": q.Method, "bits": bits, "group_size": q.BlockCols}
	}
	return nil
}

// String names the format and its blocks ("q4/1x32").
func (q Quant) String() string {
	if q.Method == "" {
		return "none"
	}
	return fmt.Sprintf("%s/%dx%d", q.Method, q.BlockRows, q.BlockCols)
}

// DType is the dtype of the format's codes: f8_e4m3, i8 or u8 (4-bit
// codes two a byte); graph.Invalid for none.
func (q Quant) DType() graph.DType {
	switch q.Method {
	case QuantFP8:
		return graph.F8E4M3
	case QuantQ8:
		return graph.I8
	case QuantQ4:
		return graph.U8
	}
	return graph.Invalid
}

// ScaleDType is the dtype LoadWeights makes the scales in: f32 for fp8 (as
// published), f16 for q8 and q4.
func (q Quant) ScaleDType() graph.DType {
	if q.Method == QuantFP8 {
		return graph.F32
	}
	return graph.F16
}

// ScaleName is the name of the scales of the matrix called name:
// name_scale_inv for fp8 (as published), name_scale for q8 and q4.
func (q Quant) ScaleName(name string) string {
	if q.Method == QuantFP8 {
		return name + "_scale_inv"
	}
	return name + "_scale"
}

// Attrs are the product's attributes.
func (q Quant) Attrs() ops.QuantAttrs {
	return ops.QuantAttrs{BlockRows: q.BlockRows, BlockCols: q.BlockCols}
}

// scaleShape is the shape of the scales of a matrix [out, in], after the
// leading dimensions of a stack of them (lead: [E] for experts): one table
// of blocks per matrix.
func (q Quant) scaleShape(out, in int, lead ...int) []int {
	return append(append([]int(nil), lead...), (out+q.BlockRows-1)/q.BlockRows, (in+q.BlockCols-1)/q.BlockCols)
}

// Stored is how a model's weights are stored, for graphs built to read
// them as stored: each weight's dtype, and the format of the quantized
// matrices. A model declares every matrix of a linear layer through
// Linear, which picks the product by the stored dtype, so that a model
// reads plain and quantized checkpoints with no code of its own.
type Stored struct {
	// DType gives a weight's stored dtype (StoredDType of a checkpoint,
	// Tensors.DType of loaded weights); nil: bf16.
	DType func(name string) graph.DType
	// Quant is the format of the matrices stored quantized.
	Quant Quant
	// QuantizeFloat declares the matrices Linear reads that are stored in
	// a float type as quantized in Quant's format, for LoadWeights to
	// quantize them (LoadOptions.Quant): quantizing at load.
	QuantizeFloat bool
}

// DTypeOf is the stored dtype of the weight name (DType's, or bf16).
func (s Stored) DTypeOf(name string) graph.DType {
	if s.DType == nil {
		return graph.BF16
	}
	return s.DType(name)
}

// OnLoad is the format LoadOptions.Quant takes for a checkpoint stored as
// s says: Quant when QuantizeFloat asks for the matrices stored in a
// float type to be quantized at load, else none.
func (s Stored) OnLoad() Quant {
	if s.QuantizeFloat {
		return s.Quant
	}
	return Quant{}
}

// ReadStored reads how a checkpoint's matrices are stored (its config's
// quantization_config, ReadQuant) for a load asked to quantize them in the
// format of quant ("": none; QuantizeTo): the Stored its graphs are built
// with to load it, QuantizeFloat set when the matrices stored in a float
// type are to be quantized at load. Its DType is the caller's to set
// (StoredDType of the checkpoint). The errors name the field or the flag.
func ReadStored(cfg *weights.Config, quant string) (Stored, error) {
	q, err := ReadQuant(cfg)
	if err != nil {
		return Stored{}, err
	}
	q, onLoad, err := QuantizeTo(q, quant, "checkpoint")
	if err != nil {
		return Stored{}, fmt.Errorf("%s: %w", cfg.Path(), err)
	}
	return Stored{Quant: q, QuantizeFloat: onLoad}, nil
}

// Matrix declares the weight name [out, in] as stored, for an op that
// reads it whole (an embedding table, an output head): it must be stored
// in a float type; a quantized one is an error naming it.
func (s Stored) Matrix(b *graph.Builder, name string, out, in int) *graph.Value {
	dt := s.DTypeOf(name)
	if dt.IsQuantized() {
		b.Fail(fmt.Errorf("weight %s is stored quantized (%s), but is read unquantized (an embedding or an output head)", name, dt))
	}
	return b.Weight(name, dt, out, in)
}

// Linear is x · Wᵀ for the matrix W called name, [out, in], as stored:
// matmul of W in its float type, or quant_matmul of W's codes and their
// scales (Quant.ScaleName, declared beside it) when W is stored quantized
// in Quant's format, or in a float type with QuantizeFloat set.
func (s Stored) Linear(b *graph.Builder, x *graph.Value, name string, out, in int) *graph.Value {
	w, sc, ok := s.quantized(b, name, out, in)
	if !ok {
		return ops.MatMul(b, x, w)
	}
	return ops.QuantMatMul(b, x, w, sc, s.Quant.Attrs())
}

// Experts is expert_matmul of x by the experts called name, [experts, out,
// in] (a stack of matrices, one per expert), for the routed ids, as
// stored: in their float type, or quant_expert_matmul of their codes and
// scales (one table of blocks per expert) as Linear reads a matrix.
func (s Stored) Experts(b *graph.Builder, x, ids *graph.Value, name string, experts, out, in int) *graph.Value {
	w, sc, ok := s.quantized(b, name, out, in, experts)
	if !ok {
		return ops.ExpertMatMul(b, x, w, ids)
	}
	return ops.QuantExpertMatMul(b, x, w, sc, ids, s.Quant.Attrs())
}

// quantized declares the weight name [lead..., out, in] as stored: its
// float matrix (ok false), or its codes and scales (ok true) when it is
// stored quantized in Quant's format or in a float type with
// QuantizeFloat set.
func (s Stored) quantized(b *graph.Builder, name string, out, in int, lead ...int) (w, scales *graph.Value, ok bool) {
	dt, q := s.DTypeOf(name), s.Quant
	shape := append(append([]int(nil), lead...), out, in)
	if !dt.IsQuantized() && !(s.QuantizeFloat && q.Method != "") {
		return b.Weight(name, dt, shape...), nil, false
	}
	if q.DType() == graph.Invalid || q.BlockRows < 1 || q.BlockCols < 1 || dt.IsQuantized() && dt != q.DType() {
		b.Fail(fmt.Errorf("weight %s is stored as %s, which the quantization (%s) does not describe", name, dt, q))
		return b.Weight(name, dt, shape...), nil, false // a placeholder: the builder has failed
	}
	sn := q.ScaleName(name)
	sdt := s.DTypeOf(sn)
	if !dt.IsQuantized() || !sdt.IsFloat() {
		sdt = q.ScaleDType() // made at load
	}
	shape[len(shape)-1] = ops.QuantCols(q.DType(), in)
	return b.Weight(name, q.DType(), shape...), b.Weight(sn, sdt, q.scaleShape(out, in, lead...)...), true
}
