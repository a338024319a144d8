package lm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
)

// TestReadRope: transformers 5's rope_parameters and the older top-level
// rope_theta, partial_rotary_factor and rope_scaling read alike, under a
// prefix too; yarn's original context falls back to
// max_position_embeddings; an unknown rope type and a factor out of range
// are errors naming the field.
func TestReadRope(t *testing.T) {
	read := func(body, prefix string) (ops.RopeAttrs, error) {
		cfg, err := weights.ParseConfig("config.json", []byte(body))
		require.NoError(t, err)
		return lm.ReadRope(cfg, prefix, 128)
	}
	llama3 := ops.RopeScaling{Type: ops.RopeLlama3, Factor: 8, OriginalMaxPositions: 8192, LowFreqFactor: 1, HighFreqFactor: 4}
	want := ops.RopeAttrs{HeadDim: 128, Rotary: 32, Theta: 5e5, Scaling: llama3}
	for _, c := range []struct{ body, prefix string }{
		{`{"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "partial_rotary_factor": 0.25, "factor": 8,
			"original_max_position_embeddings": 8192, "low_freq_factor": 1, "high_freq_factor": 4}}`, ""},
		{`{"rope_theta": 5e5, "partial_rotary_factor": 0.25, "rope_scaling": {"type": "llama3", "factor": 8,
			"original_max_position_embeddings": 8192, "low_freq_factor": 1, "high_freq_factor": 4}}`, ""},
		{`{"text_config": {"rope_theta": 5e5, "partial_rotary_factor": 0.25, "rope_scaling": {"rope_type": "llama3", "factor": 8,
			"original_max_position_embeddings": 8192, "low_freq_factor": 1, "high_freq_factor": 4}}}`, "text_config."},
	} {
		r, err := read(c.body, c.prefix)
		require.NoError(t, err, c.body)
		require.Equal(t, want, r, c.body)
	}
	r, err := read(`{}`, "")
	require.NoError(t, err)
	require.Equal(t, ops.RopeAttrs{HeadDim: 128, Rotary: 128, Theta: 10000}, r)
	r, err = read(`{"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}`, "")
	require.NoError(t, err)
	require.Equal(t, ops.RopeAttrs{HeadDim: 128, Rotary: 128, Theta: 1e6}, r)
	r, err = read(`{"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 4}}`, "")
	require.NoError(t, err)
	require.Equal(t, 4096, r.Scaling.OriginalMaxPositions)

	_, err = read(`{"rope_parameters": {"rope_type": "dynamic"}}`, "")
	require.EqualError(t, err, `rope_parameters.rope_type "dynamic": want default, linear, llama3 or yarn`)
	_, err = read(`{"text_config": {"partial_rotary_factor": 2}}`, "text_config.")
	require.ErrorContains(t, err, "text_config.partial_rotary_factor")
}
