package cpu

import (
	"fmt"
	"math"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Kernels of PLE: ple_hash, ngram_embed and ple_gate.

// pleHashKernel maps each row's n-gram history to table rows.
func pleHashKernel(_ *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	at, err := ops.NodeAttrs[ops.PLEHashAttrs](n)
	if err != nil {
		return nil, err
	}
	ng, hp := at.NGram, at.HeadsPerNGram
	nh := (ng - 1) * hp
	if ng < 2 || hp <= 0 || len(at.Mult) != ng || len(at.Sizes) != nh || len(at.Offsets) != nh {
		return nil, fmt.Errorf("ple_hash: ngram %d, %d heads per n-gram, %d multipliers, %d sizes, %d offsets", ng, hp, len(at.Mult), len(at.Sizes), len(at.Offsets))
	}
	for h, s := range at.Sizes {
		if s <= 0 {
			return nil, fmt.Errorf("ple_hash: head %d has table size %d", h, s)
		}
	}
	ids, err := i32Buf("ids", in[0])
	if err != nil {
		return nil, err
	}
	hist, err := i32Buf("hist", in[1])
	if err != nil {
		return nil, err
	}
	rowsOut, err := i32Buf("output", out[0])
	if err != nil {
		return nil, err
	}
	rows := len(ids)
	if len(hist) != ng-1 || len(rowsOut) != rows*nh {
		return nil, fmt.Errorf("hist of %d, output of %d elements for %d rows of %d heads", len(hist), len(rowsOut), rows, nh)
	}
	call, eos := in[2], at.EOS
	mult, sizes, offs := at.Mult, at.Sizes, at.Offsets
	return ops.StepFunc(func() error {
		p0, used, err := callRecord(n.Op, call, rows)
		if err != nil {
			return err
		}
		tok := func(j int) int32 {
			switch {
			case j >= p0:
				return ids[j-p0]
			case j >= 0:
				return hist[j%(ng-1)]
			}
			return eos
		}
		ts := make([]int64, ng)
		for t := 0; t < used; t++ {
			p := p0 + t
			ts[0] = int64(tok(p))
			seen := false
			for s := 1; s < ng; s++ {
				v := tok(p - s)
				seen = seen || v == eos
				if seen {
					v = eos
				}
				ts[s] = int64(v)
			}
			mix := ts[0] * mult[0]
			for o := 2; o <= ng; o++ {
				mix ^= ts[o-1] * mult[o-1]
				for i := 0; i < hp; i++ {
					h := (o-2)*hp + i
					r := mix % sizes[h]
					if r < 0 {
						r += sizes[h]
					}
					id := r + offs[h]
					if id < 0 || id > math.MaxInt32 {
						return fmt.Errorf("row %d head %d: table row %d outside the i32 range", t, h, id)
					}
					rowsOut[t*nh+h] = int32(id)
				}
			}
		}
		clear(rowsOut[used*nh:])
		for j := max(p0, p0+used-(ng-1)); j < p0+used; j++ {
			hist[j%(ng-1)] = ids[j-p0]
		}
		return nil
	}), nil
}

// ngramEmbedKernel gathers table rows from the shards.
func ngramEmbedKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	ids, err := i32Buf("rows", in[0])
	if err != nil {
		return nil, err
	}
	nh := n.Inputs[0].Shape[1]
	w := n.Inputs[1].Shape[1]
	shards := make([]matrix, len(in)-1)
	starts := make([]int, len(in)) // starts[i]: the first table row of shard i; last: the table's rows
	for i := range shards {
		s := n.Inputs[1+i].Shape
		if shards[i], err = matrixOf(fmt.Sprintf("shard %d", i), in[1+i], s[0], w); err != nil {
			return nil, err
		}
		starts[i+1] = starts[i] + s[0]
	}
	total := starts[len(shards)]
	y, err := f32s("output", out[0])
	if err != nil {
		return nil, err
	}
	if len(y) != len(ids)*w || nh <= 0 {
		return nil, fmt.Errorf("output of %d elements for %d row ids of %d", len(y), len(ids), w)
	}
	return ops.StepFunc(func() error {
		for i, id := range ids {
			if id < 0 || int(id) >= total {
				return fmt.Errorf("token %d head %d: row %d outside the table of %d rows", i/nh, i%nh, id, total)
			}
		}
		be.rowwise(len(ids), w, func(i int) {
			id := int(ids[i])
			s := 0
			for id >= starts[s+1] {
				s++
			}
			dst := y[i*w : (i+1)*w]
			r := id - starts[s]
			if src := shards[s].block(r, r+1, dst); !shards[s].decodes() {
				copy(dst, src)
			}
		})
		return nil
	}), nil
}

// pleGateKernel is gv_c = sigmoid(signed sqrt(kn_c·qn_c / sqrt(H))) · v.
func pleGateKernel(be *Backend, n *graph.Node, in, out []*Buffer) (ops.Step, error) {
	c, h, rows, err := hcDims(n)
	if err != nil {
		return nil, err
	}
	v, err := f32Bufs([]string{"kn", "qn", "v", "output"}, []*Buffer{in[0], in[1], in[2], out[0]}, rows*c*h, rows*c*h, rows*h, rows*c*h)
	if err != nil {
		return nil, err
	}
	kn, qn, vv, y := v[0], v[1], v[2], v[3]
	inv := 1 / math.Sqrt(float64(h))
	return ops.StepFunc(func() error {
		be.rowwise(rows, 2*c*h, func(r int) {
			vr := vv[r*h : (r+1)*h]
			for k := 0; k < c; k++ {
				o := (r*c + k) * h
				var s float64
				for i, a := range kn[o : o+h] {
					s += float64(a) * float64(qn[o+i])
				}
				gam := s * inv
				sq := math.Sqrt(max(math.Abs(gam), 1e-6))
				switch {
				case gam > 0:
					gam = sq
				case gam < 0:
					gam = -sq
				}
				gate := float32(sigmoid64(gam))
				yr := y[o : o+h]
				for i, x := range vr {
					yr[i] = gate * x
				}
			}
		})
		return nil
	}), nil
}
