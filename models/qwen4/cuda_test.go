package qwen4

import (
	"github.com/reel-runtime/reel/lm"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/ops/cuda"
	"github.com/reel-runtime/reel/ops/cuda/cudatest"
)

// cudaBackend opens the CUDA backend or skips the test with the one-line
// reason where CUDA cannot be used (no driver, no card, no NVRTC); any
// other error, such as kernels that do not compile, fails the test.
func cudaBackend(t *testing.T) *cuda.Backend { return cudatest.Backend(t, cuda.Options{}) }

// TestCUDAGolden: both tiny checkpoints on CUDA reproduce the transformers
// logits within 1e-3, over whole sequences, and prefilled by half then one
// token per call (the decode plans, recorded and replayed as CUDA graphs).
func TestCUDAGolden(t *testing.T) {
	be := cudaBackend(t)
	for _, name := range checkpoints {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(testdata, name)
			s := newSession(t, loadModel(t, dir), Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}}})
			full, inc := checkGolden(t, s, readGolden(t, dir), 1e-3)
			t.Logf("cuda: largest |logit - transformers|: full %.3g, incremental %.3g; %s", full, inc, s.Stats())
		})
	}
}

// TestCUDASnapshotAndDraft: on CUDA, the MTP head's logits are the CPU's
// within 1e-3, and a rollback to a snapshot re-runs to the same logits.
func TestCUDASnapshotAndDraft(t *testing.T) {
	be := cudaBackend(t)
	f := newMTPFixture(t)
	ids := longest(readGolden(t, filepath.Join(testdata, checkpoints[0])))[:17]
	m := loadModel(t, f.withHead)
	cpu := newSession(t, m, Options{})
	gpu := newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}}})
	for _, s := range []*Session{cpu, gpu} {
		_, err := s.Forward(ids[:10], 0, lm.WantLast)
		require.NoError(t, err)
	}
	want, _, err := cpu.DraftRows(cpu.hidden(), ids[10:11], 9, lm.WantLast)
	require.NoError(t, err)
	got, _, err := gpu.DraftRows(gpu.hidden(), ids[10:11], 9, lm.WantLast)
	require.NoError(t, err)
	require.Less(t, maxDiff(t, rowsOf(t, got), rowsOf(t, want)), 1e-3, "the head's logits")
	drafts, err := gpu.Draft(ids[10], 3)
	require.NoError(t, err)
	require.Len(t, drafts, 3)

	require.NoError(t, gpu.Snapshot())
	first, err := gpu.Forward(ids[10:14], 10, lm.WantAll)
	require.NoError(t, err)
	a := rowsOf(t, first)
	require.NoError(t, gpu.Rollback(10))
	again, err := gpu.Forward(ids[10:14], 10, lm.WantAll)
	require.NoError(t, err)
	require.Equal(t, 0.0, maxDiff(t, rowsOf(t, again), a), "after the rollback")
	ref, err := cpu.Forward(ids[10:14], 10, lm.WantAll)
	require.NoError(t, err)
	require.Less(t, maxDiff(t, a, rowsOf(t, ref)), 1e-3, "cuda against the cpu")
}

// TestCUDAVerify: speculation windows on CUDA (the taped forward and the
// settle stage) leave the session where the CPU's does: the same accepted
// drafts and, for the next token, logits within 1e-3.
func TestCUDAVerify(t *testing.T) {
	be := cudaBackend(t)
	m, ids, want, _ := speculation(t, 6)
	wrong := (want[3] + 1) % m.Config.Vocab
	for _, drafts := range [][]int{want[1:5], {want[1], want[2], wrong, want[4]}, {wrong}} {
		var next [][]float32
		var acc []int
		for _, s := range []*Session{newSession(t, m, Options{}), newSession(t, m, Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}}})} {
			_, err := s.Forward(ids, 0, lm.WantLast)
			require.NoError(t, err)
			a, _, err := s.Verify(want[0], drafts)
			require.NoError(t, err)
			out, err := s.Forward([]int{want[a+1]}, s.Pos(), lm.WantLast)
			require.NoError(t, err)
			acc = append(acc, a)
			next = append(next, rowsOf(t, out)[0])
		}
		require.Equal(t, acc[0], acc[1], "accepted drafts of %v", drafts)
		require.Less(t, maxDiff(t, next[1:], next[:1]), 1e-3, "the next token's logits after %v", drafts)
	}
}
