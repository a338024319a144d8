package lm_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/lm"
)

// TestWarnPastMaxPositions: a forward that reaches past MaxPositions runs
// and logs one warning naming the limit; the next ones log nothing more.
func TestWarnPastMaxPositions(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := lm.NewSession(newModel(), wideGraphs{}, lm.SessionOptions{Options: lm.Options{Logger: log}, MaxPositions: 3})
	require.NoError(t, err)
	defer s.Close()
	// The state of these graphs is a row wide: forward one id at a time.
	for pos := range 3 {
		_, err = s.Forward([]int{1}, pos, lm.WantLast)
		require.NoError(t, err)
	}
	require.Empty(t, logs.String(), "positions 0 to 2 are within 3")
	_, err = s.Forward([]int{2}, 3, lm.WantLast)
	require.NoError(t, err, "a forward past the limit runs")
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "max_position_embeddings=3")
	require.Contains(t, logs.String(), "positions=4")
	_, err = s.Forward([]int{3}, 4, lm.WantLast)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), logs.String())

	_, err = lm.NewSession(newModel(), wideGraphs{}, lm.SessionOptions{MaxPositions: -1})
	require.ErrorContains(t, err, "max positions -1")
}
