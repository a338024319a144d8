// Package qwen2 is Qwen2 (Qwen2ForCausalLM) as models/llama's decoder:
// Llama with a bias on the query, key and value projections.
package qwen2

import (
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/llama"
	"github.com/reel-runtime/reel/weights"
)

func init() {
	llama.Register(models.Arch{Name: "qwen2", ModelTypes: []string{"qwen2"},
		Architectures: []string{"Qwen2ForCausalLM"}, InfoFields: []string{"use_sliding_window"}}, ReadConfig)
}

// ReadConfig reads a Qwen2 config.json: Llama's, with q, k and v biased
// (not o, nor the MLP). Sliding-window layers (use_sliding_window true)
// are refused.
func ReadConfig(cfg *weights.Config) (llama.Config, error) {
	c, err := llama.ReadConfig(cfg)
	c.AttnBias, c.OBias, c.MLPBias = true, false, false
	return c, err
}
