package graph

import (
	"errors"
	"fmt"
)

// tOp is a test-only op whose rule is a plain function: graph knows no ops,
// so its tests bring their own.
type tOp struct {
	name string
	rule func(attrs any, in []*Value) (Signature, error)
}

func (o tOp) Name() string                                    { return o.name }
func (o tOp) Infer(attrs any, in []*Value) (Signature, error) { return o.rule(attrs, in) }

// tAttrs are attributes of the test ops that take some, for dumps.
type tAttrs struct {
	K int
	F float32
}

// testOp gives the test ops by name; it is the graph.OpLookup of these tests.
//
//	ew:    elementwise over inputs of one dtype and shape, one output like input 0
//	read:  reads anything, one f32[1] output
//	write: writes input 0 (a state), reads the rest, no output
//	split: tAttrs.K outputs of input 0's spec
//	boom:  its rule panics
//	liar:  claims to write input 0 whatever it is
//	bad:   gives an output with an invalid dtype
//	bad2:  gives a valid output, then one with a Dyn extent
func testOp(name string) (Op, bool) {
	switch name {
	case "ew":
		return tOp{name, func(_ any, in []*Value) (Signature, error) {
			if len(in) == 0 {
				return Signature{}, errors.New("ew takes at least one input")
			}
			for i, v := range in[1:] {
				if v.DType != in[0].DType || !v.Shape.Equal(in[0].Shape) {
					return Signature{}, fmt.Errorf("input 0 %s and input %d %s differ", in[0], i+1, v)
				}
			}
			return Signature{Outputs: []Spec{{in[0].DType, in[0].Shape}}}, nil
		}}, true
	case "read":
		return tOp{name, func(_ any, in []*Value) (Signature, error) {
			return Signature{Outputs: []Spec{{F32, Shape{1}}}}, nil
		}}, true
	case "write":
		return tOp{name, func(_ any, in []*Value) (Signature, error) {
			if len(in) == 0 || in[0].Kind != State {
				return Signature{}, errors.New("write takes a state first")
			}
			return Signature{Writes: []int{0}}, nil
		}}, true
	case "split":
		return tOp{name, func(a any, in []*Value) (Signature, error) {
			at, ok := a.(tAttrs)
			if !ok || len(in) != 1 {
				return Signature{}, errors.New("split takes tAttrs and one input")
			}
			sig := Signature{}
			for range at.K {
				sig.Outputs = append(sig.Outputs, Spec{in[0].DType, in[0].Shape})
			}
			return sig, nil
		}}, true
	case "boom":
		return tOp{name, func(any, []*Value) (Signature, error) { panic("boom rule") }}, true
	case "liar":
		return tOp{name, func(any, []*Value) (Signature, error) { return Signature{Writes: []int{0}}, nil }}, true
	case "bad":
		return tOp{name, func(any, []*Value) (Signature, error) {
			return Signature{Outputs: []Spec{{Invalid, Shape{2}}}}, nil
		}}, true
	case "bad2":
		return tOp{name, func(any, []*Value) (Signature, error) {
			return Signature{Outputs: []Spec{{F32, Shape{2}}, {F32, Shape{2, Dyn}}}}, nil
		}}, true
	}
	return nil, false
}

// op is testOp for a name known to exist.
func op(name string) Op {
	o, ok := testOp(name)
	if !ok {
		panic("no test op " + name)
	}
	return o
}

// one applies a single-output test op.
func one(b *Builder, name string, attrs any, in ...*Value) *Value {
	return b.Apply(op(name), attrs, 1, in...)[0]
}
