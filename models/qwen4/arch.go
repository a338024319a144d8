package qwen4

import (
	"fmt"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
)

// BenchShapeName names BenchShape among the synthetic shapes.
const BenchShapeName = "qwen4-12l"

func init() {
	models.Register(models.Arch{
		Name:          "qwen4",
		ModelTypes:    []string{"qwen4_exp", "qwen4_exp_text"},
		Architectures: []string{"Qwen4ExpForCausalLM"},
		Load:          func(dir string) (models.Model, error) { return Load(dir) },
		LoadQuantized: func(dir, quant string) (models.Model, error) { return LoadQuantized(dir, quant) },
		Synthetic: map[string]func(graph.DType, uint64, lm.Progress) (models.Model, error){
			BenchShapeName: func(dt graph.DType, seed uint64, p lm.Progress) (models.Model, error) {
				return synthetic(BenchShape(), dt, seed, makeValues, p)
			},
		},
		Deferred: map[string]func(graph.DType, uint64) (models.Model, error){
			BenchShapeName:    deferred(BenchShape),
			ReleasedShapeName: deferred(ReleasedShape),
		},
		Shapes: map[string]func() (models.Model, error){
			BenchShapeName:    func() (models.Model, error) { return Shapes(BenchShape(), graph.BF16) },
			ReleasedShapeName: func() (models.Model, error) { return Shapes(ReleasedShape(), graph.BF16) },
		},
		InfoFields: []string{"layer_types", "hc_count", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
			"shared_expert_intermediate_size", "linear_num_key_heads", "linear_num_value_heads", "ple_layer_ids"},
		Params: []models.Param{{Name: "mtp", Usage: "qwen4: run the MTP draft head when the checkpoint has one: on or off (default: on when drafting)"}},
	})
}

// Arch names the architecture.
func (m *Model) Arch() string { return "qwen4" }

// Vocab is the length of a row of logits.
func (m *Model) Vocab() int { return m.Config.Vocab }

// Stages names the graphs a dump shows: the forward, the MTP head's draft
// and a speculation window's settle.
func (m *Model) Stages() []string { return []string{"forward", "draft", "settle"} }

// Graph builds a stage's graph: settle over rows rows of a window of as
// many rows.
func (m *Model) Graph(stage string, rows int, want lm.Want, o models.Options) (*graph.Graph, error) {
	if err := o.CheckParams("qwen4", "mtp"); err != nil {
		return nil, err
	}
	c := m.Config
	switch stage {
	case "forward", "all":
		return Build(&c, Key{Stage: Forward, Want: want, Rows: rows}, m)
	case "draft":
		if !m.HasMTP {
			return nil, fmt.Errorf("qwen4: the checkpoint has no MTP head (no mtp.* tensors)")
		}
		return Build(&c, Key{Stage: Draft, Want: want, Rows: rows}, m)
	case "settle":
		return Build(&c, Key{Stage: Settle, Want: lm.WantNone, Rows: rows, TapeRows: rows}, m)
	}
	return nil, fmt.Errorf("qwen4: unknown stage %q: want forward, draft or settle", stage)
}

// NewSession starts a session; the MTP head runs when the session will
// draft (o.Drafting) or o's mtp param is on, and not when it is off.
func (m *Model) NewSession(o models.Options) (models.Session, error) {
	if err := o.CheckParams("qwen4", "mtp"); err != nil {
		return nil, err
	}
	mtp, err := o.OnOff("mtp", o.Drafting)
	if err != nil {
		return nil, err
	}
	s, err := NewSession(m, Options{SessionOptions: o.SessionOptions, NoMTP: !mtp})
	if err != nil {
		return nil, err // not a nil *Session in the interface
	}
	return s, nil
}
