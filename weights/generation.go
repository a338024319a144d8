package weights

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/reel-runtime/reel/sample"
)

// GenerationFile is the name of a checkpoint's generation defaults.
const GenerationFile = "generation_config.json"

// GenerationConfig is a checkpoint's generation_config.json: transformers'
// defaults for generating with the model. Each field is nil when the file
// does not set it (or sets it to null).
type GenerationConfig struct {
	DoSample          *bool    // do_sample: false is greedy
	Temperature       *float64 // temperature, 0 or more
	TopK              *int     // top_k, 0 or more (0: off)
	TopP              *float64 // top_p, in (0, 1]
	MinP              *float64 // min_p, in [0, 1)
	RepetitionPenalty *float64 // repetition_penalty, above 0
	// EOSTokenIDs is eos_token_id, which may be one id or a list.
	EOSTokenIDs  []int
	BOSTokenID   *int // bos_token_id
	PadTokenID   *int // pad_token_id
	MaxNewTokens *int // max_new_tokens
}

// LoadGenerationConfig reads generation_config.json in the checkpoint
// folder dir. A folder without one gives the zero GenerationConfig and no
// error.
func LoadGenerationConfig(dir string) (GenerationConfig, error) {
	path := filepath.Join(dir, GenerationFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return GenerationConfig{}, nil
	}
	if err != nil {
		return GenerationConfig{}, err
	}
	return ParseGenerationConfig(path, data)
}

// ParseGenerationConfig parses the contents of a generation_config.json;
// path is used in error messages. Malformed JSON, a field of the wrong
// type, NaN, infinities and values out of range are errors naming the file
// and the field. Fields other than those of GenerationConfig are ignored.
func ParseGenerationConfig(path string, data []byte) (GenerationConfig, error) {
	c, err := ParseConfig(path, data)
	if err != nil {
		return GenerationConfig{}, err
	}
	var g GenerationConfig
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// rangeErr names a field whose value is out of range.
	rangeErr := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%s: field %q: %v is %s", path, field, v, want))
	}
	floatIn := func(field string, ok func(float64) bool, want string) *float64 {
		v, err := optional(c, field, c.Float)
		note(err)
		if v != nil && !ok(*v) {
			rangeErr(field, *v, want)
			return nil
		}
		return v
	}
	count := func(field string) *int {
		v, err := optional(c, field, c.Int)
		note(err)
		if v != nil && (*v < 0 || *v > math.MaxInt32) {
			rangeErr(field, *v, "outside [0, 2^31)")
			return nil
		}
		return v
	}
	g.DoSample, err = optional(c, "do_sample", c.Bool)
	note(err)
	g.Temperature = floatIn("temperature", func(v float64) bool { return v >= 0 }, "negative")
	g.TopK = count("top_k")
	g.TopP = floatIn("top_p", func(v float64) bool { return v > 0 && v <= 1 }, "outside (0, 1]")
	g.MinP = floatIn("min_p", func(v float64) bool { return v >= 0 && v < 1 }, "outside [0, 1)")
	g.RepetitionPenalty = floatIn("repetition_penalty", func(v float64) bool { return v > 0 }, "not above 0")
	g.BOSTokenID = count("bos_token_id")
	g.PadTokenID = count("pad_token_id")
	g.MaxNewTokens = count("max_new_tokens")
	g.EOSTokenIDs, err = c.IDs("eos_token_id")
	note(err)
	if len(errs) > 0 {
		return GenerationConfig{}, errors.Join(errs...)
	}
	return g, nil
}

// optional reads the field key with get, or returns nil when it is missing
// or null.
func optional[T any](c *Config, key string, get func(string, T) (T, error)) (*T, error) {
	if _, present, err := c.value(key); err != nil || !present {
		return nil, err
	}
	var zero T
	v, err := get(key, zero)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// Sampling returns the file's sampling settings for sample.Resolve.
func (g GenerationConfig) Sampling() sample.Params {
	return sample.Params{
		DoSample:          g.DoSample,
		Temperature:       g.Temperature,
		TopK:              g.TopK,
		TopP:              g.TopP,
		MinP:              g.MinP,
		RepetitionPenalty: g.RepetitionPenalty,
	}
}

// Stopping returns the file's end-of-sequence ids and token limit (0, no
// limit, when max_new_tokens is not set) as a Stopper's options.
func (g GenerationConfig) Stopping() sample.StopOptions {
	o := sample.StopOptions{EOS: g.EOSTokenIDs}
	if g.MaxNewTokens != nil {
		o.MaxTokens = *g.MaxNewTokens
	}
	return o
}
