package lm

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/reel-runtime/reel/weights"
)

// ExpertStacks say how a checkpoint may store the stacked weights of a
// mixture of experts one expert at a time, as transformers' per-expert
// modules do: the stack pre+ending, for an ending of Parts, is made of
// expert e's tensors pre+Dir+e+"."+part for each of its parts, in order
// (gate then up, say). A checkpoint that stores a stack whole is read as
// it is.
type ExpertStacks struct {
	Checkpoint *weights.Checkpoint
	// Dir is what comes between a layer's prefix and an expert's index
	// ("mlp.experts.").
	Dir string
	// Parts are, by the ending of a stack's name ("mlp.experts.down_proj"),
	// the endings of the tensors of an expert it is made of
	// ("down_proj.weight"). No ending ends another.
	Parts map[string][]string
	// Name gives the checkpoint's name of a tensor, "" for one it lacks
	// (LoadOptions.Name); nil: its own name, if the checkpoint has it.
	Name func(string) string
}

// name is the checkpoint's name of the tensor n ("" if it lacks it).
func (x ExpertStacks) name(n string) string {
	if x.Name != nil {
		return x.Name(n)
	}
	if x.Checkpoint.Has(n) {
		return n
	}
	return ""
}

// Expert gives the checkpoint's names of expert e's tensors of the stack
// name (the name of one it lacks as it would be), in stacking order; false
// when name is no stack of Parts or the checkpoint stores it whole.
func (x ExpertStacks) Expert(name string, e int) ([]string, bool) {
	if x.name(name) != "" {
		return nil, false
	}
	for ending, parts := range x.Parts {
		if pre, ok := strings.CutSuffix(name, ending); ok {
			names := make([]string, len(parts))
			for i, part := range parts {
				n := fmt.Sprintf("%s%s%d.%s", pre, x.Dir, e, part)
				names[i] = cmp.Or(x.name(n), n)
			}
			return names, true
		}
	}
	return nil, false
}

// Make is LoadOptions.Make for the stacks the checkpoint stores per
// expert: StackExperts of their tensors.
func (x ExpertStacks) Make(d Declared, ck *weights.Checkpoint) (Tensor, []string, bool, error) {
	if _, ok := x.Expert(d.Name, 0); !ok {
		return Tensor{}, nil, false, nil
	}
	t, reads, err := StackExperts(ck, d, func(e int) []string {
		names, _ := x.Expert(d.Name, e)
		return names
	})
	return t, reads, err == nil, err
}

// Stored is the checkpoint's tensor whose dtype the weight name is stored
// in: expert 0's first for a stack the checkpoint stores per expert, else
// its own ("" if it lacks it).
func (x ExpertStacks) Stored(name string) string {
	if names, ok := x.Expert(name, 0); ok {
		return names[0]
	}
	return x.name(name)
}

// From gives the checkpoint's tensors of the experts of a stack it stores
// per expert (models.Sourced's from: those a checkpoint written with the
// stack whole replaces); nil for any other weight.
func (x ExpertStacks) From(name string, experts int) []string {
	var from []string
	for e := range experts {
		names, ok := x.Expert(name, e)
		if !ok {
			return nil
		}
		for _, n := range names {
			if x.Checkpoint.Has(n) {
				from = append(from, n)
			}
		}
	}
	return slices.Clip(from)
}
