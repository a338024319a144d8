// Package mistral is Mistral (MistralForCausalLM) as models/llama's
// decoder: Llama whose every layer attends to a sliding window of keys.
package mistral

import (
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/llama"
	"github.com/reel-runtime/reel/weights"
)

func init() {
	llama.Register(models.Arch{Name: "mistral", ModelTypes: []string{"mistral"},
		Architectures: []string{"MistralForCausalLM"}, InfoFields: []string{"sliding_window"}}, ReadConfig)
}

// ReadConfig reads a Mistral config.json: Llama's, every layer seeing the
// last sliding_window keys (4096 when absent, as transformers' default;
// null: every earlier key).
func ReadConfig(cfg *weights.Config) (llama.Config, error) {
	c, err := llama.ReadConfig(cfg)
	if err != nil || cfg.IsNull("sliding_window") {
		return c, err
	}
	c.Window, err = cfg.IntIn("sliding_window", 4096, 1, 1<<30)
	return c, err
}
