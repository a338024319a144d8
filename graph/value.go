package graph

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind says where a value's memory comes from and how long it lives.
type Kind uint8

// The kinds of value.
const (
	// Temp lives inside one run of a plan; the planner lays it out in the arena.
	Temp Kind = iota
	// Input is uploaded by the caller for each run (token ids, the call record).
	Input
	// Weight is bound by checkpoint name and never written.
	Weight
	// State persists across runs and is mutated in place by the nodes that
	// declare it in their Writes (KV rows, recurrent states, conv rings).
	State
)

var kindNames = [...]string{Temp: "temp", Input: "input", Weight: "weight", State: "state"}

// String names the kind as dumps print it.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText writes the kind's name for JSON dumps.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name, so JSON dumps read back.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// ParseKind reads a kind's name as String writes it.
func ParseKind(s string) (Kind, error) {
	for i, n := range kindNames {
		if n == s {
			return Kind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown value kind %q", s)
}

// Dyn marks a dimension whose extent is fixed only when memory is bound: the row
// capacity of a State value such as a KV slot, which grows between runs. Only the
// first dimension of a State value may be Dyn.
const Dyn = -1

// Shape is the extent of each dimension, outermost first.
type Shape []int

// Elems is the number of elements, or -1 when a dimension is Dyn.
func (s Shape) Elems() int {
	n := 1
	for _, d := range s {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}

// Equal reports whether two shapes have the same extents.
func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// Last is the innermost extent (1 for a scalar).
func (s Shape) Last() int {
	if len(s) == 0 {
		return 1
	}
	return s[len(s)-1]
}

// Rows is the product of every extent but the last: the rows a row-wise op runs over.
func (s Shape) Rows() int {
	if len(s) == 0 {
		return 1
	}
	return Shape(s[:len(s)-1]).Elems()
}

// String writes the shape as [2 3], with ? for a Dyn extent.
func (s Shape) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		if d == Dyn {
			b.WriteByte('?')
		} else {
			b.WriteString(strconv.Itoa(d))
		}
	}
	b.WriteByte(']')
	return b.String()
}

// Value is a tensor in a graph: the input or output of nodes.
type Value struct {
	// ID is the value's index in Graph.Values.
	ID    int
	Name  string
	DType DType
	Shape Shape
	Kind  Kind
	// Producer is the node that computes a Temp value; nil for the other kinds.
	Producer *Node
}

// String writes name:dtype[shape], the form dumps and errors use.
func (v *Value) String() string {
	if v == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s:%s%s", v.Name, v.DType, v.Shape)
}

// Bytes is the size of the value's data, or -1 when a dimension is Dyn.
func (v *Value) Bytes() int {
	n := v.Shape.Elems()
	if n < 0 {
		return -1
	}
	bl := v.DType.BlockLen()
	if bl == 0 {
		return 0
	}
	return (n + bl - 1) / bl * v.DType.Size()
}

// Spec is the dtype and shape of a value an op will produce.
type Spec struct {
	DType DType
	Shape Shape
}

// String writes dtype[shape].
func (s Spec) String() string { return s.DType.String() + s.Shape.String() }
