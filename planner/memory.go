package planner

import (
	"fmt"
	"slices"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// Memory lays out every temporary in one arena. Liveness runs over the
// schedule: a value lives from the step that makes it to the last step that
// reads it (to the end for a graph output). Walking the schedule, each
// node's outputs are placed (best fit among the free blocks, else at the
// end), then the memory of the values that die at that node is freed. An
// output takes its input's memory in place when the op allows it (Def.InPlace),
// the input is a temporary read only once by this node and never after, is
// not a graph output, and has the output's size. A traced value
// (Planned.Traced) lives to the end, as a graph output does. Same graph,
// same offsets.
type Memory struct {
	// Align is the alignment of every offset and size (Align when 0).
	Align int
}

// Name is "memory".
func (Memory) Name() string { return "memory" }

// storage is one block of the arena shared by a value and its in-place heirs.
type storage struct {
	off, size int
	end       int // last step any holder is read
	freed     bool
}

// Run sets p.Offsets, p.ArenaBytes and p.TempBytes; it needs p.Schedule.
func (m Memory) Run(p *Planned) (string, error) {
	align := m.Align
	if align <= 0 {
		align = Align
	}
	g := p.Graph
	if len(p.Schedule) != len(g.Nodes) {
		return "", fmt.Errorf("the schedule has %d nodes, the graph %d: schedule first", len(p.Schedule), len(g.Nodes))
	}
	keep := make([]*graph.Value, len(p.Traced))
	for i, t := range p.Traced {
		keep[i] = t.Value
	}
	offs, arena, temps, inPlace, err := layout(g, p.Schedule, align, keep)
	if err != nil {
		return "", err
	}
	p.Offsets, p.ArenaBytes, p.TempBytes = offs, arena, temps
	saved := 0.0
	if temps > 0 {
		saved = 100 * (1 - float64(arena)/float64(temps))
	}
	return fmt.Sprintf("arena %d bytes for %d bytes of temporaries (%.1f%% saved), %d in place", arena, temps, saved, inPlace), nil
}

func roundUp(n, a int) int { return (n + a - 1) / a * a }

// layout computes the placement; see Memory. keep are values that live to
// the end as the graph's outputs do.
func layout(g *graph.Graph, sched []*graph.Node, align int, keep []*graph.Value) (offs []Alloc, arena, temps, inPlace int, err error) {
	step := make([]int, len(g.Nodes))
	for i, n := range sched {
		step[n.ID] = i
	}
	offs = make([]Alloc, len(g.Values))
	for i, v := range g.Values {
		offs[i] = Alloc{Bytes: -1, Def: -1, Last: -1}
		if v.Kind == graph.Temp {
			if v.Producer == nil {
				return nil, 0, 0, 0, fmt.Errorf("temp %s has no producer", v)
			}
			d := step[v.Producer.ID]
			offs[i] = Alloc{Bytes: v.Bytes(), Def: d, Last: d}
			temps += roundUp(v.Bytes(), align)
		}
	}
	for i, n := range sched {
		for _, v := range n.Inputs {
			if v.Kind == graph.Temp && offs[v.ID].Last < i {
				offs[v.ID].Last = i
			}
		}
	}
	isOut := map[*graph.Value]bool{}
	for _, v := range append(slices.Clip(g.Outputs), keep...) {
		isOut[v] = true
		if v.Kind == graph.Temp {
			offs[v.ID].Last = len(sched)
		}
	}

	var fl freeList
	st := make([]*storage, len(g.Values))
	for i, n := range sched {
		def, _ := ops.Lookup(n.Op)
		taken := map[*storage]bool{}
		for j, v := range n.Outputs {
			a := &offs[v.ID]
			if u := inPlaceInput(def, n, j, i, offs, isOut, st); u != nil && !taken[st[u.ID]] {
				s := st[u.ID]
				taken[s] = true
				st[v.ID] = s
				a.Offset, a.Alias = s.off, u
				if a.Last > s.end {
					s.end = a.Last
				}
				inPlace++
				continue
			}
			size := roundUp(a.Bytes, align)
			s := &storage{off: fl.alloc(size), size: size, end: a.Last}
			taken[s] = true
			st[v.ID] = s
			a.Offset = s.off
		}
		for _, vs := range [][]*graph.Value{n.Inputs, n.Outputs} {
			for _, v := range vs {
				if s := st[v.ID]; v.Kind == graph.Temp && s != nil && !s.freed && s.end <= i {
					s.freed = true
					fl.free(s.off, s.size)
				}
			}
		}
	}
	return offs, fl.top, temps, inPlace, nil
}

// inPlaceInput gives the input whose memory output j of node n (at step i)
// may take, or nil.
func inPlaceInput(def *ops.Def, n *graph.Node, j, i int, offs []Alloc, isOut map[*graph.Value]bool, st []*storage) *graph.Value {
	if def == nil || j >= len(def.InPlace) {
		return nil
	}
	k := def.InPlace[j]
	if k < 0 || k >= len(n.Inputs) {
		return nil
	}
	u, out := n.Inputs[k], n.Outputs[j]
	if u.Kind != graph.Temp || isOut[u] || offs[u.ID].Last != i || u.Bytes() != out.Bytes() || st[u.ID] == nil {
		return nil
	}
	for x, w := range n.Inputs {
		if w == u && x != k {
			return nil
		}
	}
	if s := st[u.ID]; s.freed || s.end != i {
		return nil
	}
	return u
}

// freeList tracks the free blocks of an arena that grows at its top.
type freeList struct {
	blocks []block // sorted by offset, never adjacent
	top    int
}

type block struct{ off, size int }

// alloc places size bytes: the smallest free block that holds them (the
// lowest on ties), else the free block that ends at the top, grown, else
// the top.
func (f *freeList) alloc(size int) int {
	if size == 0 {
		return 0
	}
	best := -1
	for i, b := range f.blocks {
		if b.size >= size && (best < 0 || b.size < f.blocks[best].size) {
			best = i
		}
	}
	if best >= 0 {
		b := &f.blocks[best]
		off := b.off
		b.off += size
		b.size -= size
		if b.size == 0 {
			f.blocks = append(f.blocks[:best], f.blocks[best+1:]...)
		}
		return off
	}
	if n := len(f.blocks); n > 0 && f.blocks[n-1].off+f.blocks[n-1].size == f.top {
		off := f.blocks[n-1].off
		f.blocks = f.blocks[:n-1]
		f.top = off + size
		return off
	}
	off := f.top
	f.top += size
	return off
}

// free returns a block, merging it with its neighbours.
func (f *freeList) free(off, size int) {
	if size == 0 {
		return
	}
	i := 0
	for i < len(f.blocks) && f.blocks[i].off < off {
		i++
	}
	f.blocks = append(f.blocks, block{})
	copy(f.blocks[i+1:], f.blocks[i:])
	f.blocks[i] = block{off, size}
	if i+1 < len(f.blocks) && f.blocks[i].off+f.blocks[i].size == f.blocks[i+1].off {
		f.blocks[i].size += f.blocks[i+1].size
		f.blocks = append(f.blocks[:i+1], f.blocks[i+2:]...)
	}
	if i > 0 && f.blocks[i-1].off+f.blocks[i-1].size == f.blocks[i].off {
		f.blocks[i-1].size += f.blocks[i].size
		f.blocks = append(f.blocks[:i], f.blocks[i+1:]...)
	}
}
