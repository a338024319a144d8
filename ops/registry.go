package ops

import (
	"sort"

	"github.com/reel-runtime/reel/graph"
)

// defs is every op Reel knows, by name. It is filled once from the list below
// and never changed.
var defs = func() map[string]*Def {
	m := map[string]*Def{}
	for _, d := range []*Def{
		OpEmbed, OpMatMul, OpGroupedMatMul,
		OpAdd, OpSub, OpMul, OpSigmoid, OpSiLU, OpScale,
		OpL2Norm, OpRMSNorm,
		OpRope, OpKVWrite, OpAttention,
		OpSliceRows, OpLastRow, OpArgmax, OpStore,
		OpSlerp, OpMix, OpSwiGLU, OpGatedNorm, OpNormRope,
	} {
		m[d.Op] = d
	}
	for _, d := range familyDefs {
		m[d.Op] = d
	}
	for _, d := range plannerDefs {
		m[d.Op] = d
	}
	for _, d := range decodeDefs {
		m[d.Op] = d
	}
	for _, d := range slerpDefs {
		m[d.Op] = d
	}
	for _, d := range fusedMoEDefs {
		m[d.Op] = d
	}
	for _, d := range fusedHCDefs {
		m[d.Op] = d
	}
	for _, d := range quantDefs {
		m[d.Op] = d
	}
	for _, d := range quantFusedDefs {
		m[d.Op] = d
	}
	return m
}()

// Lookup finds an op by name.
func Lookup(name string) (*Def, bool) {
	d, ok := defs[name]
	return d, ok
}

// LookupOp is Lookup as a graph.OpLookup, for graph.Validate.
func LookupOp(name string) (graph.Op, bool) {
	d, ok := defs[name]
	return d, ok
}

// All lists every op, sorted by name.
func All() []*Def {
	out := make([]*Def, 0, len(defs))
	for _, d := range defs {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return out
}
