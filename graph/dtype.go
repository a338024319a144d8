package graph

import (
	"fmt"
	"strings"
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
)

var dtypeNames = [...]string{Invalid: "invalid", F32: "f32", F16: "f16", BF16: "bf16", I32: "i32", I64: "i64"}

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
	}
	return 0
}

// BlockLen is the number of elements stored in Size bytes: 1 for plain types.
func (d DType) BlockLen() int {
	if d == Invalid {
		return 0
	}
	return 1
}

// IsFloat reports whether the type holds real numbers.
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 }

// ParseDType reads a name as String writes it; safetensors names ("BF16") are accepted too.
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
