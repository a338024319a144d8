package graph

import (
	"fmt"
	"strings"

	"github.com/reel-runtime/reel/half"
)

// DType is the element type of a value.
type DType uint8

// The element types a graph may carry. Block-quantized weight types get their own
// constants beside these; their Size is the bytes of one block and BlockLen the
// elements in it.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	I32
	I64
	// F8E4M3 is float8_e4m3fn: a sign, 4 exponent bits (bias 7) and 3
	// mantissa bits, no infinities, one NaN pattern per sign (S.1111.111),
	// largest finite 448. Graphs carry it only as the elements of a
	// block-scaled weight (ops.QuantMatMul); it is not IsFloat.
	F8E4M3
	// I8 is a signed byte: the codes of an 8-bit group-quantized weight.
	I8
	// U8 is an unsigned byte: two 4-bit codes each in a 4-bit
	// group-quantized weight.
	U8
)

var dtypeNames = [...]string{Invalid: "invalid", F32: "f32", F16: "f16", BF16: "bf16", I32: "i32", I64: "i64",
	F8E4M3: "f8_e4m3", I8: "i8", U8: "u8"}

// String gives the short lower-case name used in dumps ("f32", "bf16").
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the bytes of one element (of one block for quantized types).
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	case I64:
		return 8
	case F8E4M3, I8, U8:
		return 1
	}
	return 0
}

// DecodeFloats converts src, little-endian elements of the floating-point
// type d (F32, F16 or BF16; see IsFloat), to dst, which holds as many
// elements. It reports false, converting nothing, for any other type.
func (d DType) DecodeFloats(dst []float32, src []byte) bool {
	switch d {
	case F32:
		half.DecodeF32(dst, src)
	case F16:
		half.DecodeF16(dst, src)
	case BF16:
		half.DecodeBF16(dst, src)
	default:
		return false
	}
	return true
}

// BlockLen is the number of elements stored in Size bytes: 1 for plain types.
func (d DType) BlockLen() int {
	if d == Invalid {
		return 0
	}
	return 1
}

// IsFloat reports whether the type holds real numbers that kernels read
// element by element as weights or activations (f32, f16, bf16).
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 }

// IsQuantized reports whether the type holds the codes of a quantized
// weight, which mean numbers only with the weight's scales (f8_e4m3, i8,
// u8).
func (d DType) IsQuantized() bool { return d == F8E4M3 || d == I8 || d == U8 }

// ParseDType reads a name as String writes it; safetensors names ("BF16",
// "F8_E4M3") are accepted too.
func ParseDType(s string) (DType, error) {
	l := strings.ToLower(s)
	for i, n := range dtypeNames {
		if i != 0 && n == l {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q", s)
}

// MarshalText writes the dtype's name, so JSON dumps read "bf16", not 3.
func (d DType) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a dtype's name, so JSON dumps read back.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
