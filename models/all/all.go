// Package all registers every architecture Reel has with the models
// registry: a program that imports it runs any of them. Adding an
// architecture is its folder under models/ and one import line here.
package all

import (
	_ "github.com/reel-runtime/reel/models/dory"  // Dory
	_ "github.com/reel-runtime/reel/models/llama" // Llama, Qwen3
	_ "github.com/reel-runtime/reel/models/mistral"
	_ "github.com/reel-runtime/reel/models/qwen2"
	_ "github.com/reel-runtime/reel/models/qwen4" // Qwen4-Exp
)
