package cpu

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of the MoE block: moe_route, expert_matmul, silu_glu and
// moe_combine.

// moeRouteKernel is softmax, top-k and renormalization per row.
func moeRouteKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.RouteAttrs](n)
	if err != nil {
		return nil, err
	}
	rows, e := n.Inputs[0].Shape[0], n.Inputs[0].Shape[1]
	k := at.K
	if k <= 0 || k > e {
		return nil, fmt.Errorf("top-%d of %d experts", k, e)
	}
	logits, err := f32s("logits", in[0])
	if err != nil {
		return nil, err
	}
	ids, err := i32Buf("ids", out[0])
	if err != nil {
		return nil, err
	}
	w, err := f32s("weights", out[1])
	if err != nil {
		return nil, err
	}
	if len(logits) != rows*e || len(ids) != rows*k || len(w) != rows*k {
		return nil, fmt.Errorf("logits of %d, ids of %d, weights of %d elements for %d rows, top-%d of %d", len(logits), len(ids), len(w), rows, k, e)
	}
	return ops.StepFunc(func() error {
		for i, x := range logits {
			if math.IsNaN(float64(x)) {
				return fmt.Errorf("row %d: router logit of expert %d is NaN", i/e, i%e)
			}
		}
		be.rowwise(rows, e*(k+2), func(t int) {
			l := logits[t*e : (t+1)*e]
			mx := l[0]
			for _, x := range l {
				mx = max(mx, x)
			}
			var sum float64
			for _, x := range l {
				sum += math.Exp(float64(x - mx))
			}
			// the k largest logits (their order is the probabilities' order),
			// kept sorted, ties to the smaller id: a later equal logit never
			// displaces a kept one
			top := ids[t*k : (t+1)*k]
			nTop := 0
			for j, x := range l {
				if nTop == k && x <= l[top[k-1]] {
					continue
				}
				i := min(nTop, k-1)
				for i > 0 && x > l[top[i-1]] {
					top[i] = top[i-1]
					i--
				}
				top[i] = int32(j)
				nTop = min(nTop+1, k)
			}
			ws := w[t*k : (t+1)*k]
			var kept float64
			for i, j := range top {
				p := math.Exp(float64(l[j]-mx)) / sum
				ws[i] = float32(p)
				kept += p
			}
			if at.Norm {
				for i, j := range top {
					ws[i] = float32(math.Exp(float64(l[j]-mx)) / sum / kept)
				}
			}
		})
		return nil
	}), nil
}

// expertRows is how many rows of an expert matrix one task decodes and applies.
const expertRows = 64

// expertMatMulKernel computes every unit (t, j) = w[ids[t, j]] · x.
func expertMatMulKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	ws := n.Inputs[1].Shape
	wm, err := matrixOf("w", in[1], ws[0]*ws[1], ws[2])
	if err != nil {
		return nil, err
	}
	return expertProduct(be, n, in[0], wm, in[2], out[0], ws[0])
}

// expertProduct is the step of an expert product: every unit (t, j) =
// expert ids[t, j] of wm (the experts' rows one after the other: e
// matrices) times x. Units are grouped by expert, so each expert's rows
// are read (and decoded) once for all the units that take it; tasks are
// (expert, block of rows).
func expertProduct(be *Backend, n *graph.Node, xb *Buffer, wm matrix, idsb, yb *Buffer, e int) (ops.Step, error) {
	nOut, nIn := wm.rows/e, wm.cols
	rows, k := n.Inputs[len(n.Inputs)-1].Shape[0], n.Inputs[len(n.Inputs)-1].Shape[1]
	perUnit := len(n.Inputs[0].Shape) == 3 // x[T, k, in]
	xl := rows * nIn
	if perUnit {
		xl *= k
	}
	v, err := f32Bufs([]string{"x", "output"}, []*Buffer{xb, yb}, xl, rows*k*nOut)
	if err != nil {
		return nil, err
	}
	x, y := v[0], v[1]
	ids, err := i32Buf("ids", idsb)
	if err != nil {
		return nil, err
	}
	if len(ids) != rows*k {
		return nil, fmt.Errorf("ids of %d elements, want %d", len(ids), rows*k)
	}
	blocks := (nOut + expertRows - 1) / expertRows
	return ops.StepFunc(func() error {
		units := make([][]int32, e) // units of each expert
		for u, id := range ids {
			if id < 0 || int(id) >= e {
				return fmt.Errorf("row %d pick %d: expert id %d outside [0, %d)", u/k, u%k, id, e)
			}
			units[id] = append(units[id], int32(u))
		}
		type task struct{ e, lo, hi int }
		var tasks []task
		for ex, us := range units {
			if len(us) == 0 {
				continue
			}
			for b := 0; b < blocks; b++ {
				tasks = append(tasks, task{ex, b * expertRows, min(nOut, (b+1)*expertRows)})
			}
		}
		be.rowwiseTasks(len(tasks), expertRows*nIn*2, func(lo, hi int) {
			var sp *[]float32
			if wm.decodes() {
				sp = be.borrow(expertRows * nIn)
				defer be.giveBack(sp)
			}
			for _, tk := range tasks[lo:hi] {
				var scratch []float32
				if sp != nil {
					scratch = *sp
				}
				wb := wm.block(tk.e*nOut+tk.lo, tk.e*nOut+tk.hi, scratch)
				for _, u := range units[tk.e] {
					xu := x[int(u)/k*nIn : (int(u)/k+1)*nIn]
					if perUnit {
						xu = x[int(u)*nIn : (int(u)+1)*nIn]
					}
					yu := y[int(u)*nOut : (int(u)+1)*nOut]
					for r := tk.lo; r < tk.hi; r++ {
						yu[r] = dot(wb[(r-tk.lo)*nIn:(r-tk.lo+1)*nIn], xu)
					}
				}
			}
		})
		return nil
	}), nil
}

// siluGLUKernel is silu(x[:F]) ⊙ x[F:] over the last dimension.
func siluGLUKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	f := n.Outputs[0].Shape.Last()
	total := n.Outputs[0].Shape.Elems()
	v, err := f32Bufs([]string{"x", "output"}, []*Buffer{in[0], out[0]}, 2*total, total)
	if err != nil {
		return nil, err
	}
	x, y := v[0], v[1]
	if f <= 0 {
		return nil, fmt.Errorf("empty rows")
	}
	return ops.StepFunc(func() error {
		be.rowwise(total/f, 2*f, func(r int) {
			xr, yr := x[2*r*f:2*(r+1)*f], y[r*f:(r+1)*f]
			for i := range yr {
				yr[i] = float32(silu64(float64(xr[i])) * float64(xr[f+i]))
			}
		})
		return nil
	}), nil
}

// expertMatMulGLUKernel is expert_matmul_glu (ops/fused_moe.go): the
// expert product into scratch, then silu_glu, the unfused arithmetic bit
// for bit.
func expertMatMulGLUKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	ws, is := n.Inputs[1].Shape, n.Inputs[2].Shape
	if len(in) != 3 || len(ws) != 3 || len(is) != 2 {
		return nil, fmt.Errorf("expert_matmul_glu: w %v must be [experts, out, in] and ids %v [rows, k]", ws, is)
	}
	yv, yb := be.scratchOf("gate_up", graph.Spec{DType: graph.F32, Shape: graph.Shape{is[0], is[1], ws[1]}})
	mm, err := expertMatMulKernel(be, part(n, "expert_matmul", nil, n.Inputs, []*graph.Value{yv}), in, []*Buffer{yb})
	if err != nil {
		return nil, err
	}
	glu, err := siluGLUKernel(be, part(n, "silu_glu", nil, []*graph.Value{yv}, n.Outputs), []*Buffer{yb}, out)
	if err != nil {
		return nil, err
	}
	return steps{mm, glu}, nil
}

// moeCombineKernel is Σ_j w_j y_j (+ sigmoid(sg)·s).
func moeCombineKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	ys := n.Inputs[0].Shape
	rows, k, h := ys[0], ys[1], ys[2]
	names := []string{"y", "w", "output"}
	bufs := []*Buffer{in[0], in[1], out[0]}
	lens := []int{rows * k * h, rows * k, rows * h}
	shared := len(in) == 4
	if shared {
		names = append(names, "s", "sg")
		bufs = append(bufs, in[2], in[3])
		lens = append(lens, rows*h, rows)
	}
	v, err := f32Bufs(names, bufs, lens...)
	if err != nil {
		return nil, err
	}
	y, w, o := v[0], v[1], v[2]
	return ops.StepFunc(func() error {
		be.rowwise(rows, (k+1)*h, func(t int) {
			or := o[t*h : (t+1)*h]
			clear(or)
			for j := 0; j < k; j++ {
				axpy(w[t*k+j], y[(t*k+j)*h:(t*k+j+1)*h], or)
			}
			if shared {
				axpy(sigmoid32(v[4][t]), v[3][t*h:(t+1)*h], or)
			}
		})
		return nil
	}), nil
}
