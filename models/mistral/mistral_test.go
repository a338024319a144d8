package mistral_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/llama"
	"github.com/reel-runtime/reel/models/mistral"
	"github.com/reel-runtime/reel/models/modeltest"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/weights"
)

// dir is a tiny Mistral (3 layers, a window of 4 keys, 4 query and 2 KV
// heads of 24 != 64/4, untied) with transformers 5.17's logits.
const dir = "testdata/mistral-sw-21"

// load loads dir through the registry, as the reel command does.
func load(t testing.TB) *llama.Model { return modeltest.Load[*llama.Model](t, dir, "mistral") }

// session is a session of m on be, in prompt chunks of chunk rows.
func session(t testing.TB, m *llama.Model, be ops.Backend, chunk int) *lm.Session {
	return modeltest.Session(t, m, be, chunk)
}

// TestGolden reproduces transformers' logits whole and incrementally, the
// prompt in one chunk and in chunks of 1, 3 and 7 rows (the 11-id case
// runs past the window: rows see 4 keys, and chunks of 7 hold more).
func TestGolden(t *testing.T) {
	m := load(t)
	require.Equal(t, 4, m.Config.Window)
	for _, chunk := range []int{0, 1, 3, 7} {
		modeltest.CheckGolden(t, session(t, m, cpu.New(2), chunk), dir, 1e-4)
	}
}

// TestWindowMatters: without its window the model misses the golden
// logits (so TestGolden checks the window).
func TestWindowMatters(t *testing.T) {
	m := load(t)
	m.Config.Window = 0
	g, err := models.ReadGolden(dir)
	require.NoError(t, err)
	r, err := g.Cases[1].Check(session(t, m, cpu.New(2), 0))
	require.NoError(t, err)
	require.Greater(t, r.Full, 1e-3)
}

// TestRings: prompt chunks of 1, 3 and 7 rows, then a token per call,
// give one forward's logits over a sequence long enough for the rings
// (window, chunk and llama.Rewind rows) to wrap.
func TestRings(t *testing.T) {
	m := load(t)
	ids := make([]int, 2*llama.Rewind+30)
	for i := range ids {
		ids[i] = (i*101 + 7) % m.Config.Vocab
	}
	modeltest.CheckChunks(t, m, cpu.New(2), ids, 2*llama.Rewind, []int{1, 3, 7}, 1e-4)
}

// TestConfig: sliding_window as transformers reads it (absent: 4096;
// null: every key), and a bad one refused naming the field.
func TestConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	for _, c := range []struct {
		field string // sliding_window's JSON, "" for none
		want  int
		err   string
	}{
		{`4`, 4, ""}, {`4096`, 4096, ""}, {`null`, 0, ""}, {"", 4096, ""},
		{`0`, 0, `"sliding_window" = 0`}, {`-3`, 0, `"sliding_window" = -3`},
		{`"4"`, 0, "sliding_window"}, {`1e40`, 0, "sliding_window"},
	} {
		js := strings.Replace(string(raw), `"sliding_window": 4,`, `"sliding_window": `+c.field+`,`, 1)
		if c.field == "" {
			js = strings.Replace(string(raw), `"sliding_window": 4,`, "", 1)
		}
		cfg, err := weights.ParseConfig("config.json", []byte(js))
		require.NoError(t, err)
		got, err := mistral.ReadConfig(cfg)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.field)
			continue
		}
		require.NoError(t, err, c.field)
		require.Equal(t, c.want, got.Window, c.field)
	}
}
