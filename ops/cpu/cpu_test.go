package cpu

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/optest"
)

// TestOpCases runs the golden table on the CPU backend, with one goroutine
// per kernel and with several (the parallel paths). The CPU computes in f32
// over exactly decoded weights, so every case must meet the f32 tolerance,
// whatever the table allows other backends.
func TestOpCases(t *testing.T) {
	for _, threads := range []int{1, 3} {
		be := New(threads)
		for _, c := range optest.Cases() {
			if threads > 1 && !strings.Contains(c.Name, "block/") && c.WantErr == "" && !big(c) {
				continue // the small cases take the one-goroutine paths anyway
			}
			c.Tol = min(c.Tol, optest.TolF32)
			t.Run(c.Name+"/threads="+string(rune('0'+threads)), func(t *testing.T) {
				optest.Check(t, be, c)
			})
		}
	}
}

// BenchmarkOpCases is the op table's perf mode on the CPU (every core): the
// time and GB/s of each case, e.g.
// go test -run '^$' -bench 'OpCases/matmul/' ./ops/cpu.
func BenchmarkOpCases(b *testing.B) {
	optest.BenchCases(b, New(0), nil)
}

// big reports whether a case has enough data for the parallel paths.
func big(c optest.Case) bool {
	n := 0
	for _, t := range c.Inputs {
		n += t.Len()
	}
	return n >= 4096
}

// TestEveryOpHasKernelAndCase checks that every op has a CPU kernel (the
// reference backend), that every kernel is for a registered op and that
// each has at least one case in the table.
func TestEveryOpHasKernelAndCase(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range optest.Cases() {
		g, err := c.Graph()
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for _, n := range g.Nodes {
			covered[n.Op] = true
		}
	}
	for _, d := range ops.All() {
		if _, has := kernels[d.Op]; !has {
			t.Errorf("op %s has no CPU kernel", d.Op)
		}
	}
	for name := range kernels {
		if _, ok := ops.Lookup(name); !ok {
			t.Errorf("kernel %s is for no op", name)
		}
		if !covered[name] {
			t.Errorf("op %s has a CPU kernel but no case in ops/optest", name)
		}
	}
}

// TestTableCatchesFaults makes sure the harness fails a backend that writes
// past its output, writes its input, leaves an element unwritten or is
// wrong: each broken kernel must make Check fail.
func TestTableCatchesFaults(t *testing.T) {
	var c optest.Case
	for _, x := range optest.Cases() {
		if x.Name == "add/[7 33]/[33]" {
			c = x
		}
	}
	if c.Name == "" {
		t.Fatal("case add/[7 33]/[33] is missing")
	}
	faults := map[string]kernelFunc{
		"writes past the output": func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
			st, err := binaryKernel(opAdd)(be, n, in, out)
			return ops.StepFunc(func() error {
				if err := st.Run(); err != nil {
					return err
				}
				// The view is capped at its end; the element after it is the
				// arena's margin, which the harness owns.
				last := &out[0].F32[len(out[0].F32)-1]
				*(*float32)(unsafe.Add(unsafe.Pointer(last), 4)) = 1
				return nil
			}), err
		},
		"writes its input": func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
			st, err := binaryKernel(opAdd)(be, n, in, out)
			return ops.StepFunc(func() error {
				in[1].F32[0] += 1
				return st.Run()
			}), err
		},
		"skips an element": func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
			st, err := binaryKernel(opAdd)(be, n, in, out)
			return ops.StepFunc(func() error {
				keep := out[0].F32[5]
				err := st.Run()
				out[0].F32[5] = keep
				return err
			}), err
		},
		"is slightly wrong": func(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
			st, err := binaryKernel(opAdd)(be, n, in, out)
			return ops.StepFunc(func() error {
				err := st.Run()
				out[0].F32[17] *= 1 + 1e-3
				return err
			}), err
		},
	}
	for name, k := range faults {
		be := &faultyBackend{Backend: New(1), op: "add", k: k}
		ft := &recorder{TB: t}
		optest.Check(ft, be, c)
		if !ft.failed {
			t.Errorf("a kernel that %s passed the table", name)
		}
	}
}

// faultyBackend is the CPU backend with one op's kernel replaced.
type faultyBackend struct {
	*Backend
	op string
	k  kernelFunc
}

func (f *faultyBackend) Kernel(op string) (ops.Kernel, bool) {
	if op != f.op {
		return f.Backend.Kernel(op)
	}
	return ops.KernelFunc(func(n *graph.Node, in, out []ops.Buffer) (ops.Step, error) {
		ib, err := bufs(in)
		if err != nil {
			return nil, err
		}
		ob, err := bufs(out)
		if err != nil {
			return nil, err
		}
		return f.k(f.Backend, n, ib, ob)
	}), true
}

// recorder is a testing.TB that notes failures instead of reporting them.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Helper()               {}

// TestEmbedErrorMessage pins the wording of an out-of-range token id.
func TestEmbedErrorMessage(t *testing.T) {
	b := graph.NewBuilder("embed")
	table := b.Weight("table", graph.F32, 256, 2)
	ids := b.Input("ids", graph.I32, 4)
	b.Output(ops.Embed(b, table, ids))
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	be := New(1)
	tb, _ := be.Load(graph.F32, 512, make([]byte, 2048))
	ib, _ := be.Alloc(graph.I32, 4)
	raw := make([]byte, 16)
	for i, id := range []int32{1, 2, 3, 300} {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(id))
	}
	if err := be.Write(ib, raw); err != nil {
		t.Fatal(err)
	}
	r, err := ops.NewRunner(be, g, map[*graph.Value]ops.Buffer{table: tb, ids: ib})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Run()
	if err == nil || !strings.Contains(err.Error(), "embed: row 3: token id 300 outside the vocabulary of 256") {
		t.Fatalf("error %v", err)
	}
}

// TestParallelForPanics checks that a panic in any chunk reaches the caller.
func TestParallelForPanics(t *testing.T) {
	for _, chunk := range []int{0, 2} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("panic in chunk %d was lost", chunk)
				}
			}()
			parallelFor(4, 4, func(lo, hi int) {
				if lo == chunk {
					panic("boom")
				}
			})
		}()
	}
	seen := make([]int, 100)
	parallelFor(100, 7, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			seen[i]++
		}
	})
	for i, s := range seen {
		if s != 1 {
			t.Fatalf("index %d visited %d times", i, s)
		}
	}
}

// TestMatMulGemmPath checks the Sgemm path the benchmarks compare against,
// which the table does not reach, against the dot-product path.
func TestMatMulGemmPath(t *testing.T) {
	be := New(2)
	for _, dt := range []graph.DType{graph.F32, graph.BF16, graph.F16} {
		for _, s := range [][3]int{{8, 33, 70}, {33, 129, 130}} {
			rows, k, n := s[0], s[1], s[2]
			gb := graph.NewBuilder("matmul")
			y := ops.MatMul(gb, gb.Input("x", graph.F32, rows, k), gb.Weight("w", dt, n, k))
			xb, _ := be.Alloc(graph.F32, rows*k)
			copy(xb.(*Buffer).F32, benchData(rows*k))
			wb, err := be.Load(dt, n*k, weightBytes(dt, benchData(n*k)))
			if err != nil {
				t.Fatal(err)
			}
			var got [2][]float32
			for i, path := range []matmulPath{pathDots, pathGemm} {
				yb, _ := be.Alloc(graph.F32, rows*n)
				s, err := newMatMul(be, y.Producer, []*Buffer{xb.(*Buffer), wb.(*Buffer)}, []*Buffer{yb.(*Buffer)})
				if err != nil {
					t.Fatal(err)
				}
				s.path = path
				if err := s.run(); err != nil {
					t.Fatal(err)
				}
				got[i] = yb.(*Buffer).F32
			}
			a, b := make([]float64, rows*n), make([]float64, rows*n)
			for i := range a {
				a[i], b[i] = float64(got[0][i]), float64(got[1][i])
			}
			if e := optest.NMSE(b, a); !(e < 1e-12) {
				t.Errorf("%s %v: Sgemm against dots: NMSE %g", dt, s, e)
			}
		}
	}
}

// TestWeightPlacement: the same f32 weights give the same products, bit
// for bit, wherever their bytes lie (a file mapping puts a tensor at any
// multiple of 4 bytes, and the CPU reads it there without a copy; gonum's
// SIMD dot handles the elements of its second vector before a 16-byte
// boundary apart, which rounds the sum another way, so the activation
// goes there), on the default path (the Sgemm path, for benchmarks, is
// gonum's own).
func TestWeightPlacement(t *testing.T) {
	be := New(2)
	for _, rows := range []int{1, 3, manyRows + 1} {
		const k, n = 67, 9
		gb := graph.NewBuilder("matmul")
		y := ops.MatMul(gb, gb.Input("x", graph.F32, rows, k), gb.Weight("w", graph.F32, n, k))
		xb, _ := be.Alloc(graph.F32, rows*k)
		copy(xb.(*Buffer).F32, benchData(rows*k))
		w := weightBytes(graph.F32, benchData(n*k))
		var first []float32
		for off := 0; off < 32; off += 4 {
			mem := alignedBytes(off + len(w))
			copy(mem[off:], w)
			wb, err := be.Load(graph.F32, n*k, mem[off:])
			if err != nil {
				t.Fatal(err)
			}
			if unsafe.Pointer(&wb.(*Buffer).F32[0]) != unsafe.Pointer(&mem[off]) {
				t.Fatalf("offset %d: the weights were copied", off)
			}
			yb, _ := be.Alloc(graph.F32, rows*n)
			s, err := newMatMul(be, y.Producer, []*Buffer{xb.(*Buffer), wb.(*Buffer)}, []*Buffer{yb.(*Buffer)})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.run(); err != nil {
				t.Fatal(err)
			}
			got := yb.(*Buffer).F32
			if first == nil {
				first = got
			} else if !slices.Equal(first, got) {
				t.Fatalf("%d rows, offset %d: %v, at offset 0 %v", rows, off, got[:4], first[:4])
			}
		}
	}
	if a := alignedBytes(24); uintptr(unsafe.Pointer(&a[0]))%simdAlign != 0 || len(a) != 24 || cap(a) != 24 {
		t.Fatalf("alignedBytes(24): %p, len %d, cap %d", &a[0], len(a), cap(a))
	}
}
