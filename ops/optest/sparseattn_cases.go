package optest

import (
	"fmt"
	"math"
	"sort"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Cases of the QSA sparse attention ops.

func blockKeyCases() []Case {
	var cs []Case
	type bk struct {
		rows, d, rot, cr, pos, used, slotCap, keyCap int
		ring                                         bool
		dt                                           graph.DType
		err                                          string
		scaling                                      string
	}
	for _, s := range []bk{
		{4, 16, 8, 2, 0, 0, 8, 6, false, graph.F32, "", ""},   // blocks 0 and 1
		{1, 16, 8, 4, 7, 0, 4, 3, true, graph.BF16, "", ""},   // completes block 1 from a ring
		{5, 8, 4, 4, 2, 0, 4, 3, true, graph.F32, "", ""},     // a ring smaller than the chunk
		{3, 8, 4, 4, 1, 0, 8, 2, false, graph.F16, "", ""},    // completes block 0
		{2, 8, 4, 4, 4, 0, 8, 2, false, graph.F32, "", ""},    // completes nothing
		{4, 16, 8, 2, 5, 2, 16, 8, false, graph.F32, "", ""},  // padded
		{9, 16, 16, 3, 0, 0, 9, 3, false, graph.BF16, "", ""}, // blocks of 3, full rotary
		{40, 64, 16, 4, 100, 0, 160, 40, false, graph.BF16, "", ""},
		// a bucket's plan: the slot and the block keys hold the call's
		// positions, not the plan's
		{40, 64, 16, 4, 100, 27, 127, 32, false, graph.BF16, "", ""},
		{6, 16, 16, 2, 3, 0, 16, 8, false, graph.F32, "", "yarn"},
		{5, 64, 64, 4, 2, 0, 8, 4, true, graph.F32, "", "llama3"},
		{3, 8, 4, 2, 6, 0, 8, 4, false, graph.F32, "capacity", ""}, // positions past the slot
		{4, 8, 4, 2, 0, 0, 8, 1, false, graph.F32, "capacity", ""}, // blocks past the keys
	} {
		kind := "linear"
		if s.ring {
			kind = "ring"
		}
		scaling := ropeScalings[s.scaling]
		name := fmt.Sprintf("qsa_block_keys/%s/%s/%dx%d/rot=%d/block=%d/pos=%d/used=%d/cap=%d/keys=%d", kind, s.dt, s.rows, s.d, s.rot, s.cr, s.pos, s.used, s.slotCap, s.keyCap) +
			ropeName(scaling)
		if s.err != "" {
			name = "qsa_block_keys/error/" + name[len("qsa_block_keys/"):]
		}
		m := newMaker(name)
		at := ops.BlockKeyAttrs{Block: s.cr, Rope: ops.RopeAttrs{HeadDim: s.d, Rotary: s.rot, Theta: 1e7, Scaling: scaling}, Eps: 1e-6, Ring: s.ring}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("kraw", graph.Input, graph.F32, 2, s.rows, s.d), m.tensor("w", graph.Weight, s.dt, 0.5, s.d),
				m.slot("slot", s.slotCap, s.d), m.slot("keys", s.keyCap, s.d), call(s.pos, s.used)},
			Build: func(b *graph.Builder, in []*graph.Value) []*graph.Value {
				ops.QSABlockKeys(b, in[0], in[1], in[2], in[3], in[4], at)
				return nil
			},
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[4], s.rows)
				slot, keys := refBlockKeys(in[0], in[1], in[2], in[3], at, pos, used)
				return [][]float64{slot, keys}
			},
			Tol:     TolF32,
			WantErr: s.err,
		})
	}
	return cs
}

// minScoreGap is the least score gap at the top-k boundary a case's data must
// keep, so that rounding in any backend cannot change a selection.
const minScoreGap = 1e-3

func selectCases() []Case {
	var cs []Case
	type sel struct {
		rows, heads, d, cr, keep, pos, used, keyCap int
		ties                                        bool
		err                                         string
	}
	for _, s := range []sel{
		{3, 4, 16, 2, 2, 0, 0, 4, false, ""}, // dense: every block is kept
		{1, 4, 16, 2, 3, 20, 0, 16, false, ""},
		{4, 2, 8, 4, 2, 9, 0, 4, false, ""},
		{2, 4, 16, 2, 3, 13, 0, 8, true, ""}, // equal scores: the smaller block wins
		{3, 1, 16, 4, 2, 15, 2, 8, false, ""},
		{1, 4, 16, 4, 8, 1199, 0, 300, false, ""},
		{2, 4, 16, 4, 8, 300, 0, 300, false, ""},
		{24, 4, 16, 4, 8, 300, 17, 80, false, ""}, // a bucket's plan: the keys hold the call's blocks only
		{1, 4, 16, 2, 2, 20, 0, 8, false, "capacity"},
		{1, 2, 8, 2, 2, 9, 0, 8, false, "NaN"},
	} {
		name := fmt.Sprintf("qsa_select/%dx%dx%d/block=%d/keep=%d/pos=%d/used=%d/keys=%d/ties=%v", s.rows, s.heads, s.d, s.cr, s.keep, s.pos, s.used, s.keyCap, s.ties)
		if s.err != "" {
			name = "qsa_select/error/" + name[len("qsa_select/"):]
		}
		at := ops.SelectAttrs{Heads: s.heads, Block: s.cr, Keep: s.keep}
		var inputs []Tensor
		for try := 0; ; try++ {
			m := newMaker(fmt.Sprintf("%s#%d", name, try))
			qi, keys := m.in("qi", s.rows, s.heads*s.d), m.slot("keys", s.keyCap, s.d)
			if s.ties {
				for b := 1; b < s.keyCap; b++ {
					copy(keys.Data[b*s.d:(b+1)*s.d], keys.Data[:s.d])
				}
				for i := 0; i < s.d; i++ {
					keys.Data[5*s.d+i] *= 2
				}
			}
			if s.err == "NaN" {
				qi.Data[3] = nan
			}
			inputs = []Tensor{qi, keys, call(s.pos, s.used)}
			if s.err != "" {
				break
			}
			pos, used := callRows(inputs[2].Data, s.rows)
			if _, gap := refSelect(qi.Data, keys.Data, s.d, at, pos, used); gap > minScoreGap {
				break
			}
		}
		cs = append(cs, Case{
			Name:   name,
			Inputs: inputs,
			Build:  applyAll(ops.OpQSASelect, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[2], s.rows)
				sel, _ := refSelect(in[0], in[1], s.d, at, pos, used)
				return [][]float64{sel, in[1]}
			},
			Tol:     0,
			WantErr: s.err,
		})
	}
	return cs
}

func sparseAttentionCases() []Case {
	var cs []Case
	type sa struct {
		heads, kv, d, cr, keep, rows, pos, used, capacity int
		// sel is the selection; nil draws one (drawSelection) with no
		// blocks in every empty-th row (0: none) and, where bad > 0, row
		// bad − 1's third and fourth entries swapped.
		sel        []int
		empty, bad int
		err        string
	}
	// two rows at positions 100 and 101 (25 complete blocks), 8 blocks each
	big := []int{0, 3, 4, 9, 11, 17, 20, 24, 1, 2, 5, 8, 12, 13, 22, 23}
	for _, s := range []sa{
		{4, 2, 8, 2, 2, 3, 0, 0, 8, []int{-1, -1, 0, -1, 0, -1}, 0, 0, ""}, // dense from the start
		{4, 2, 8, 4, 2, 2, 17, 0, 24, []int{0, 2, 1, 3}, 0, 0, ""},
		{2, 1, 16, 2, 3, 1, 12, 0, 16, []int{1, 4, 5}, 0, 0, ""},
		{8, 2, 16, 4, 3, 3, 30, 2, 40, []int{0, 3, 6, 2, 5, 7, -1, -1, -1}, 0, 0, ""},
		{4, 4, 8, 2, 4, 2, 5, 0, 8, []int{0, 1, 2, -1, 0, 2, -1, -1}, 0, 0, ""},
		{16, 4, 32, 4, 8, 2, 100, 0, 128, big, 0, 0, ""},
		{4, 2, 8, 2, 2, 1, 9, 0, 16, []int{2, 1}, 0, 0, "not ascending"},
		{4, 2, 8, 2, 2, 1, 9, 0, 16, []int{1, 5}, 0, 0, "not ascending"},  // block 5 is not complete at position 9
		{4, 2, 8, 2, 2, 1, 9, 0, 16, []int{-1, 1}, 0, 0, "not ascending"}, // an id after the padding
		{4, 2, 8, 2, 2, 2, 7, 0, 8, []int{0, 1, 0, 1}, 0, 0, "capacity"},
		// Many rows (a prompt chunk), one block per row and KV head on
		// CUDA: hundreds of keys a row, groups of 12, 4 and 1 query heads.
		{24, 2, 256, 4, 96, 24, 500, 0, 524, nil, 0, 0, ""},
		{12, 1, 36, 3, 100, 40, 290, 0, 330, nil, 0, 0, ""},
		{8, 2, 30, 3, 64, 40, 150, 33, 200, nil, 5, 0, ""}, // d % 4 ≠ 0, padded, rows of no blocks
		{8, 2, 32, 4, 32, 48, 200, 37, 237, nil, 0, 0, ""}, // a bucket's plan: the slots hold the call's positions only
		{2, 2, 256, 4, 128, 24, 600, 0, 640, nil, 0, 0, ""},
		{16, 4, 64, 2, 40, 40, 0, 0, 40, nil, 7, 0, ""}, // dense from the start: rows of 1 .. 40 keys, some of none
		{24, 2, 256, 4, 32, 24, 200, 0, 224, nil, 0, 18, "not ascending"},
		{12, 1, 36, 3, 16, 40, 100, 0, 139, nil, 0, 0, "capacity"},
		// Decode rows over long contexts, split over key chunks on CUDA:
		// qwen4-12l's shape at 2048 positions with every block kept and
		// with a quarter of them, a speculation window of 5 rows (one of
		// no blocks), d % 4 ≠ 0, and errors.
		{24, 2, 256, 4, 512, 1, 2047, 0, 2048, nil, 0, 0, ""},
		{24, 2, 256, 4, 128, 1, 2046, 0, 2048, nil, 0, 0, ""},
		{12, 1, 64, 4, 96, 5, 1500, 4, 1505, nil, 3, 0, ""},
		{8, 2, 30, 3, 64, 3, 700, 0, 703, nil, 0, 0, ""},
		{24, 2, 256, 4, 64, 2, 1000, 0, 1002, nil, 0, 2, "not ascending"},
		{12, 1, 64, 4, 96, 5, 1500, 0, 1504, nil, 0, 0, "capacity"},
	} {
		name := fmt.Sprintf("qsa_attention/q%d-kv%d-d%d/block=%d/keep=%d/rows=%d/pos=%d/used=%d/cap=%d", s.heads, s.kv, s.d, s.cr, s.keep, s.rows, s.pos, s.used, s.capacity)
		if s.sel == nil {
			name += fmt.Sprintf("/drawn/empty=%d/bad=%d", s.empty, s.bad)
		}
		if s.err != "" {
			name = "qsa_attention/error/" + name[len("qsa_attention/"):]
			if s.sel != nil {
				name += fmt.Sprint(s.sel)
			}
		}
		m := newMaker(name)
		at := ops.SparseAttentionAttrs{Heads: s.heads, KVHeads: s.kv, HeadDim: s.d, Block: s.cr, Scale: float32(1 / math.Sqrt(float64(s.d)))}
		k := m.slot("k", s.capacity, s.kv*s.d)
		for i := range k.Data {
			k.Data[i] = round(graph.F32, 2*k.Data[i])
		}
		sel := s.sel
		if sel == nil {
			sel = m.drawSelection(s.rows, s.keep, s.cr, s.pos, s.empty)
			if s.bad > 0 {
				row := sel[(s.bad-1)*s.keep:]
				row[2], row[3] = row[3], row[2]
			}
		}
		cs = append(cs, Case{
			Name: name,
			Inputs: []Tensor{m.tensor("q", graph.Input, graph.F32, 2, s.rows, s.heads*s.d), k, m.slot("v", s.capacity, s.kv*s.d),
				intLeaf("sel", graph.Input, sel, s.rows, s.keep), call(s.pos, s.used)},
			Build: applyAll(ops.OpQSAAttention, at, 1),
			Ref: func(in [][]float64) [][]float64 {
				pos, used := callRows(in[4], s.rows)
				return [][]float64{refSparseAttention(in[0], in[1], in[2], in[3], at, pos, used), in[1], in[2]}
			},
			Tol:     TolF32,
			WantErr: s.err,
		})
	}
	return cs
}

// drawSelection is a valid qsa_select output for rows rows from position
// pos: each row's complete blocks while they fit in keep, else keep of them
// drawn at random, ascending, then −1; every empty-th row (empty > 0)
// selects no block.
func (m *maker) drawSelection(rows, keep, cr, pos, empty int) []int {
	sel := make([]int, rows*keep)
	for t := range rows {
		row := sel[t*keep : (t+1)*keep]
		nb := (pos + t + 1) / cr
		if empty > 0 && t%empty == empty-1 {
			nb = 0
		}
		// the first keep of a random permutation of the blocks, in order
		perm := make([]int, nb)
		for i := range perm {
			j := m.r.intn(i + 1)
			perm[i], perm[j] = perm[j], i
		}
		kept := perm[:min(nb, keep)]
		sort.Ints(kept)
		for i := range row {
			row[i] = -1
			if i < len(kept) {
				row[i] = kept[i]
			}
		}
	}
	return sel
}
