package weights

import (
	"fmt"
	"math"
	"math/bits"
)

// Sane limits on the sizes a config.json may give, shared by the model
// loaders. Each is far above any released model's and low enough that a
// size within it cannot make a loader hang or allocate past what the
// checkpoint's tensors then have to justify.
const (
	// MaxDim bounds any one dimension: a vocabulary, a hidden or head
	// size, a count of heads or experts (16 Mi).
	MaxDim = 1 << 24
	// MaxLayers bounds the layers (or sub-layers) of a model.
	MaxLayers = 1 << 12
	// MaxPositions bounds context lengths, attention windows and budgets
	// (64 Mi positions).
	MaxPositions = 1 << 26
)

// MulInts returns the product of its arguments, or an error when one is
// negative or the product overflows an int. Model loaders compute every
// size a config implies (a tensor's elements, a state's bytes) with it, so
// that a product that would wrap around to a small number is an error
// rather than a wrong shape.
func MulInts(a int, b ...int) (int, error) {
	if a < 0 {
		return 0, fmt.Errorf("product of %d and %v: negative factor", a, b)
	}
	p := uint64(a)
	for _, x := range b {
		if x < 0 {
			return 0, fmt.Errorf("product of %d and %v: negative factor", a, b)
		}
		hi, lo := bits.Mul64(p, uint64(x))
		if hi != 0 || lo > math.MaxInt {
			return 0, fmt.Errorf("product of %d and %v overflows an int", a, b)
		}
		p = lo
	}
	return int(p), nil
}

// AddInts returns the sum of its arguments, or an error when one is
// negative or the sum overflows an int.
func AddInts(a int, b ...int) (int, error) {
	if a < 0 {
		return 0, fmt.Errorf("sum of %d and %v: negative term", a, b)
	}
	s := a
	for _, x := range b {
		if x < 0 {
			return 0, fmt.Errorf("sum of %d and %v: negative term", a, b)
		}
		if s > math.MaxInt-x {
			return 0, fmt.Errorf("sum of %d and %v overflows an int", a, b)
		}
		s += x
	}
	return s, nil
}

// CheckRange returns an error naming a config's integer field, its value
// v and the range, when v is outside [lo, hi]. A loader checks many at
// once with cmp.Or, which gives the first error.
func CheckRange(field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s = %d: want %d to %d", field, v, lo, hi)
	}
	return nil
}

// CheckFloat returns an error naming a config's number field, its value v
// and the range, when v is outside [lo, hi] or NaN, as CheckRange does for
// an integer one.
func CheckFloat(field string, v, lo, hi float64) error {
	if !(v >= lo && v <= hi) {
		return fmt.Errorf("%s = %v: want %v to %v", field, v, lo, hi)
	}
	return nil
}

// CheckMultiple returns an error naming two of a config's fields and
// their values when a is not a multiple of b (the query heads of the
// key-value heads, say). A b that is not positive passes: CheckRange
// reports it, in the same cmp.Or.
func CheckMultiple(fieldA string, a int, fieldB string, b int) error {
	if b > 0 && a%b != 0 {
		return fmt.Errorf("%s %d is not a multiple of %s %d", fieldA, a, fieldB, b)
	}
	return nil
}

// CheckSize returns an error naming what (the fields a tensor or state of
// a config is the product of) when its f32 bytes, the product of factors
// and 4, overflow an int: checked before a loader computes any shape, so
// that no product wraps around to a wrong one.
func CheckSize(what string, factors ...int) error {
	if _, err := MulInts(4, factors...); err != nil {
		return fmt.Errorf("%s: the f32 bytes overflow: %w", what, err)
	}
	return nil
}
