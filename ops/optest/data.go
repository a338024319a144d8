package optest

import (
	"hash/fnv"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
)

// rng is splitmix64: a small deterministic generator, so every case's data
// is the same on every machine and Go version.
type rng struct{ s uint64 }

// newRNG seeds a generator from a case's name.
func newRNG(name string) *rng {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &rng{s: h.Sum64()}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform is a value in [-1, 1).
func (r *rng) uniform() float64 { return float64(r.next()>>11)/(1<<52) - 1 }

// intn is a value in [0, n).
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// round gives the value of v stored as dt.
func round(dt graph.DType, v float64) float64 {
	switch dt {
	case graph.F32:
		return float64(float32(v))
	case graph.BF16:
		return float64(half.BF16ToF32(half.F32ToBF16(float32(v))))
	case graph.F16:
		return float64(half.F16ToF32(half.F32ToF16(float32(v))))
	case graph.I32:
		return float64(int32(v))
	case graph.F8E4M3:
		return float64(half.E4M3ToF32(half.F32ToE4M3(float32(v))))
	case graph.I8:
		return float64(int8(v))
	case graph.U8:
		return float64(uint8(v))
	}
	return v
}

// maker makes the leaves of one case, with data drawn from the case's own
// generator.
type maker struct {
	r *rng
}

func newMaker(name string) *maker { return &maker{r: newRNG(name)} }

// tensor makes a leaf with values uniform in [-amp, amp), rounded to dt.
func (m *maker) tensor(name string, kind graph.Kind, dt graph.DType, amp float64, shape ...int) Tensor {
	t := Tensor{Name: name, Kind: kind, DType: dt, Shape: graph.Shape(shape)}
	t.Data = make([]float64, t.Len())
	for i := range t.Data {
		t.Data[i] = round(dt, amp*m.r.uniform())
	}
	return t
}

// in is an f32 input with values in [-1, 1).
func (m *maker) in(name string, shape ...int) Tensor {
	return m.tensor(name, graph.Input, graph.F32, 1, shape...)
}

// weight is a weight of dt with values in [-1, 1).
func (m *maker) weight(name string, dt graph.DType, shape ...int) Tensor {
	return m.tensor(name, graph.Weight, dt, 1, shape...)
}

// slot is an f32 state [Dyn, width] bound with capacity rows of values in [-1, 1).
func (m *maker) slot(name string, capacity, width int) Tensor {
	t := Tensor{Name: name, Kind: graph.State, DType: graph.F32, Shape: graph.Shape{graph.Dyn, width}, Rows: capacity}
	t.Data = make([]float64, t.Len())
	for i := range t.Data {
		t.Data[i] = round(graph.F32, m.r.uniform())
	}
	return t
}

// ids is an i32 input of token ids drawn from [0, vocab).
func (m *maker) ids(name string, n, vocab int) Tensor {
	t := Tensor{Name: name, Kind: graph.Input, DType: graph.I32, Shape: graph.Shape{n}, Data: make([]float64, n)}
	for i := range t.Data {
		t.Data[i] = float64(m.r.intn(vocab))
	}
	return t
}

// call is the call record for a run at position pos computing rows rows (0: all).
func call(pos, rows int) Tensor {
	t := Tensor{Name: ops.CallName, Kind: graph.Input, DType: graph.I32, Shape: graph.Shape{ops.CallLen}, Data: make([]float64, ops.CallLen)}
	t.Data[ops.CallPos], t.Data[ops.CallRows] = float64(pos), float64(rows)
	return t
}

// tolFor is the tolerance for arithmetic over weights of dt.
func tolFor(dt graph.DType) float64 {
	switch dt {
	case graph.BF16:
		return TolBF16
	case graph.F16:
		return TolF16
	}
	return TolF32
}

// callRows reads the rows a call record asks for, all of rows when 0.
func callRows(c []float64, rows int) (pos, used int) {
	pos, used = int(c[ops.CallPos]), int(c[ops.CallRows])
	if used == 0 {
		used = rows
	}
	return pos, used
}

var nan = math.NaN()
