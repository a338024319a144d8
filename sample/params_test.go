package sample

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

func TestResolve(t *testing.T) {
	def := Options{Temperature: 0.8, TopK: 40, Seed: 7}
	for _, c := range []struct {
		name       string
		def        Options
		file, user Params
		want       Options
	}{
		{"defaults alone", def, Params{}, Params{}, def},
		{"the file over the defaults", def,
			Params{Temperature: ptr(0.6), TopP: ptr(0.95), MinP: ptr(0.05), RepetitionPenalty: ptr(1.1)}, Params{},
			Options{Temperature: 0.6, TopK: 40, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1.1, Seed: 7}},
		{"the user over the file", def,
			Params{Temperature: ptr(0.6), TopK: ptr(20), TopP: ptr(0.95)},
			Params{Temperature: ptr(1.2), TopK: ptr(0), PresencePenalty: ptr(0.5), FrequencyPenalty: ptr(0.1), Seed: ptr(uint64(3))},
			Options{Temperature: 1.2, TopK: 0, TopP: 0.95, PresencePenalty: 0.5, FrequencyPenalty: 0.1, Seed: 3}},
		{"do_sample false is greedy", def,
			Params{DoSample: ptr(false), Temperature: ptr(0.6), TopK: ptr(20)}, Params{},
			Options{Temperature: 0, TopK: 20, Seed: 7}},
		{"unless the user sets a temperature", def,
			Params{DoSample: ptr(false), Temperature: ptr(0.6)}, Params{Temperature: ptr(0.9)},
			Options{Temperature: 0.9, TopK: 40, Seed: 7}},
		{"the user's do_sample over the file's", def,
			Params{DoSample: ptr(false), Temperature: ptr(0.6)}, Params{DoSample: ptr(true)},
			Options{Temperature: 0.6, TopK: 40, Seed: 7}},
		{"the user's do_sample false", def,
			Params{DoSample: ptr(true), Temperature: ptr(0.6)}, Params{DoSample: ptr(false)},
			Options{Temperature: 0, TopK: 40, Seed: 7}},
		{"do_sample true with no temperature anywhere", Options{},
			Params{DoSample: ptr(true)}, Params{},
			Options{Temperature: 1}},
		{"do_sample true, the user's temperature 0", Options{},
			Params{DoSample: ptr(true)}, Params{Temperature: ptr(0.0)},
			Options{Temperature: 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := Resolve(c.def, c.file, c.user)
			require.NoError(t, err)
			require.Equal(t, c.want, o)
		})
	}
}

func TestResolveBad(t *testing.T) {
	_, err := Resolve(Options{}, Params{TopP: ptr(1.5)}, Params{})
	require.ErrorContains(t, err, "generation config: sample: top-p 1.5")
	_, err = Resolve(Options{}, Params{}, Params{TopP: ptr(0.0)})
	require.ErrorContains(t, err, "top-p 0 is outside (0, 1]", "a top-p that is set may not be 0")
	_, err = Resolve(Options{}, Params{}, Params{RepetitionPenalty: ptr(0.0)})
	require.ErrorContains(t, err, "repetition penalty 0")
	_, err = Resolve(Options{TopK: -1}, Params{}, Params{})
	require.ErrorContains(t, err, "defaults: sample: top-k -1")
	err = Params{Temperature: ptr(-1.0), MinP: ptr(1.0), TopK: ptr(-2)}.Validate()
	require.ErrorContains(t, err, "temperature")
	require.ErrorContains(t, err, "min-p")
	require.ErrorContains(t, err, "top-k")
	require.NoError(t, Params{}.Validate())
}
