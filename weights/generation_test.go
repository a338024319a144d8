package weights

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/sample"
)

func TestLoadGenerationConfig(t *testing.T) {
	// the tiny Qwen4-Exp's file, as transformers wrote it
	g, err := LoadGenerationConfig("../testdata/qwen4/qwen4-tiny-small-11")
	require.NoError(t, err)
	require.Equal(t, []int{1}, g.EOSTokenIDs)
	require.Equal(t, 2, *g.BOSTokenID)
	require.Equal(t, 0, *g.PadTokenID)
	require.Nil(t, g.DoSample)
	require.Nil(t, g.Temperature)
	require.Nil(t, g.MaxNewTokens)

	// no file: nothing set, no error
	g, err = LoadGenerationConfig(t.TempDir())
	require.NoError(t, err)
	require.Equal(t, GenerationConfig{}, g)

	// a folder that cannot be read is an error
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, GenerationFile), 0o755))
	_, err = LoadGenerationConfig(dir)
	require.Error(t, err)
}

func TestParseGenerationConfig(t *testing.T) {
	// Qwen3's released file, with min_p, a repetition penalty and a limit
	g, err := ParseGenerationConfig("generation_config.json", []byte(`{
	  "bos_token_id": 151643,
	  "do_sample": true,
	  "eos_token_id": [151645, 151643],
	  "pad_token_id": 151643,
	  "temperature": 0.6,
	  "top_k": 20,
	  "top_p": 0.95,
	  "min_p": 0.0,
	  "repetition_penalty": 1.05,
	  "max_new_tokens": 2048,
	  "transformers_version": "4.51.0",
	  "some_other_field": {"x": [1, 2]}
	}`))
	require.NoError(t, err)
	require.Equal(t, []int{151645, 151643}, g.EOSTokenIDs)
	require.True(t, *g.DoSample)
	require.Equal(t, 0.6, *g.Temperature)
	require.Equal(t, 20, *g.TopK)
	require.Equal(t, 0.95, *g.TopP)
	require.Equal(t, 0.0, *g.MinP)
	require.Equal(t, 1.05, *g.RepetitionPenalty)
	require.Equal(t, 2048, *g.MaxNewTokens)
	require.Equal(t, 151643, *g.BOSTokenID)
	require.Equal(t, sample.StopOptions{EOS: []int{151645, 151643}, MaxTokens: 2048}, g.Stopping())

	g, err = ParseGenerationConfig("g.json", []byte(`{"eos_token_id": null, "pad_token_id": null, "top_k": 40.0}`))
	require.NoError(t, err)
	require.Nil(t, g.EOSTokenIDs)
	require.Nil(t, g.PadTokenID)
	require.Equal(t, 40, *g.TopK, "an integral float is an integer")

	o, err := sample.Resolve(sample.Options{Temperature: 0.8, TopK: 40, Seed: 1}, GenerationConfig{
		DoSample: ptr(true), Temperature: ptr(0.6), TopP: ptr(0.95), RepetitionPenalty: ptr(1.1),
	}.Sampling(), sample.Params{TopK: ptr(5)})
	require.NoError(t, err)
	require.Equal(t, sample.Options{Temperature: 0.6, TopK: 5, TopP: 0.95, RepetitionPenalty: 1.1, Seed: 1}, o)
}

func TestParseGenerationConfigBad(t *testing.T) {
	for _, c := range []struct {
		json, want string
	}{
		{`{"temperature": 0.7,}`, "g.json: line 1"},
		{`[1, 2]`, "g.json: not a JSON object"},
		{`{"do_sample": "yes"}`, `g.json: field "do_sample": want a boolean, have string`},
		{`{"temperature": "hot"}`, `g.json: field "temperature": want a number`},
		{`{"temperature": NaN}`, `g.json: field "temperature" is NaN`},
		{`{"temperature": 1e400}`, `g.json: field "temperature": 1e400 is out of range`},
		{`{"temperature": -1}`, `g.json: field "temperature": -1 is negative`},
		{`{"top_p": 0}`, `g.json: field "top_p": 0 is outside (0, 1]`},
		{`{"top_p": 1.5}`, `g.json: field "top_p": 1.5 is outside (0, 1]`},
		{`{"min_p": 1}`, `g.json: field "min_p": 1 is outside [0, 1)`},
		{`{"repetition_penalty": 0}`, `g.json: field "repetition_penalty": 0 is not above 0`},
		{`{"repetition_penalty": -Infinity}`, `g.json: field "repetition_penalty" is -Infinity`},
		{`{"top_k": 2.5}`, `g.json: field "top_k": 2.5 is not an integer`},
		{`{"top_k": -1}`, `g.json: field "top_k": -1 is outside [0, 2^31)`},
		{`{"max_new_tokens": 1e12}`, `g.json: field "max_new_tokens": 1000000000000 is outside [0, 2^31)`},
		{`{"max_new_tokens": 99999999999999999999999}`, `g.json: field "max_new_tokens": 99999999999999999999999 is out of range`},
		{`{"eos_token_id": "2"}`, `g.json: field "eos_token_id": want an integer or an array of integers, have string`},
		{`{"eos_token_id": [1, "2"]}`, `g.json: field "eos_token_id[1]": want an integer`},
		{`{"eos_token_id": [1, -2]}`, `g.json: field "eos_token_id[1]": -2 is outside [0, 2^31)`},
		{`{"eos_token_id": -2}`, `g.json: field "eos_token_id": -2 is outside [0, 2^31)`},
		{`{"bos_token_id": true}`, `g.json: field "bos_token_id": want an integer, have boolean`},
	} {
		_, err := ParseGenerationConfig("g.json", []byte(c.json))
		require.ErrorContains(t, err, c.want, c.json)
	}
	// every bad field is named
	_, err := ParseGenerationConfig("g.json", []byte(`{"top_p": 2, "top_k": -1}`))
	require.ErrorContains(t, err, "top_p")
	require.ErrorContains(t, err, "top_k")
}

func ptr[T any](v T) *T { return &v }

// FuzzGenerationConfig: any input parses or is refused with an error that
// names the file; what parses is within the documented ranges.
func FuzzGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"do_sample": true, "eos_token_id": [1, 2], "temperature": 0.6, "top_k": 20, "top_p": 0.95}`))
	f.Add([]byte(`{"eos_token_id": 7, "pad_token_id": null, "min_p": 0.1, "repetition_penalty": 1.1, "max_new_tokens": 5}`))
	f.Add([]byte(`{"temperature": NaN, "eos_token_id": [Infinity]}`))
	f.Add([]byte(`{"top_k": 1e30, "eos_token_id": {"a": 1}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGenerationConfig("g.json", data)
		if err != nil {
			require.Contains(t, err.Error(), "g.json")
			return
		}
		if g.TopP != nil {
			require.True(t, *g.TopP > 0 && *g.TopP <= 1)
		}
		for _, id := range g.EOSTokenIDs {
			require.GreaterOrEqual(t, id, 0)
		}
		_, err = sample.Resolve(sample.Options{}, g.Sampling(), sample.Params{})
		require.NoError(t, err, "a file that parses resolves")
	})
}
