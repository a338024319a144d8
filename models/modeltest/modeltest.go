// Package modeltest is what the tests of every architecture's package
// share beyond weights/weightstest: setups that rewrite a checkpoint's
// tensors, the fuzzing of a model's config.json with a forward of what it
// accepts, a golden.json's check and prompts fed in chunks.
package modeltest

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/weights"
	"github.com/reel-runtime/reel/weights/weightstest"
)

// Load loads dir through the registry, as the reel command does, fails
// unless architecture arch runs it as an M, and closes it when the test
// ends.
func Load[M models.Model](t testing.TB, dir, arch string) M {
	t.Helper()
	m, err := models.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.Arch() != arch {
		t.Fatalf("%s runs as %s, want %s", dir, m.Arch(), arch)
	}
	mm, ok := m.(M)
	if !ok {
		t.Fatalf("%s loads as a %T", dir, m)
	}
	return mm
}

// Session opens a session of m on be, in prompt chunks of chunk rows (0:
// lm.DefaultChunk), closed when the test ends.
func Session(t testing.TB, m interface {
	Session(lm.SessionOptions) (*lm.Session, error)
}, be ops.Backend, chunk int) *lm.Session {
	t.Helper()
	s, err := m.Session(lm.SessionOptions{Options: lm.Options{Backend: be}, Chunk: chunk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RelRMS is the RMS of got − want relative to want's: how far a model's
// logits moved (a quantized model's from the float one's, say).
func RelRMS(got, want []float32) float64 {
	var num, den float64
	for i, x := range got {
		d := float64(x - want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// CheckGolden runs every case of dir's golden.json on s (whole and, where
// the golden has them, incrementally: models.GoldenCase.Check) and fails
// past tol, logging the largest differences.
func CheckGolden(t testing.TB, s models.Session, dir string, tol float64) {
	t.Helper()
	g, err := models.ReadGolden(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range g.Cases {
		r, err := c.Check(s)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !(r.Max() < tol) {
			t.Fatalf("case %d (%d ids): |logit - golden| whole %.3g, incremental %.3g, last %.3g: want below %g", i, len(c.IDs), r.Full, r.Incremental, r.Last, tol)
		}
		t.Logf("case %d (%d ids): |logit - golden| whole %.3g, incremental %.3g", i, len(c.IDs), r.Full, r.Incremental)
	}
}

// CheckChunks feeds ids to a session of m on be for each chunk size (its
// first prompt ids as a prompt in chunks of that many rows, the rest one
// id per call) and checks every row's logits against one forward of all
// the ids, within tol.
func CheckChunks(t testing.TB, m models.Model, be ops.Backend, ids []int, prompt int, sizes []int, tol float64) {
	t.Helper()
	open := func(chunk int) models.Session {
		s, err := m.NewSession(models.Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}, Chunk: chunk}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	out, err := open(len(ids)).Forward(ids, 0, lm.WantAll)
	if err != nil {
		t.Fatal(err)
	}
	want := out.Data().([]float32)
	for _, size := range sizes {
		s := open(size)
		out, err := s.Forward(ids[:prompt], 0, lm.WantAll)
		if err != nil {
			t.Fatalf("chunks of %d: prompt: %v", size, err)
		}
		got := out.Data().([]float32)
		for p := prompt; p < len(ids); p++ {
			out, err := s.Forward(ids[p:p+1], p, lm.WantLast)
			if err != nil {
				t.Fatalf("chunks of %d: position %d: %v", size, p, err)
			}
			got = append(got, out.Data().([]float32)...)
		}
		var d float64
		for i := range want {
			d = max(d, math.Abs(float64(got[i]-want[i])))
		}
		if !(d < tol) {
			t.Fatalf("chunks of %d: |logit - one forward's| %.3g: want below %g", size, d, tol)
		}
	}
}

// BucketChunks are the chunk sizes CheckBuckets runs goldens in (on
// lm.DefaultBuckets, whatever the backend's default): the default (64
// rows), where a golden's whole sequence and its
// first half run padded to a bucket (17 rows on 24, 40 on 48), and 15,
// where remainders of 9 to 14 rows run on a plan of 15.
var BucketChunks = []int{0, 15}

// CheckBuckets checks m's prompt chunks on row buckets (lm.BucketRows) on
// be: with dir, its golden.json within tol (CheckGolden) on sessions of
// BucketChunks; and prompts of 18 and 21 ids (one bucket of 24 rows) on a
// session of chunks of 64, the second built no plan, their logits (every
// row's, and the last row's alone) and a decode token's after them within
// tol of a session of exact rows (lm.BucketsOff).
func CheckBuckets(t testing.TB, m models.Model, be ops.Backend, dir string, tol float64) {
	t.Helper()
	open := func(chunk, buckets int) models.Session {
		s, err := m.NewSession(models.Options{SessionOptions: lm.SessionOptions{Options: lm.Options{Backend: be}, Chunk: chunk, Buckets: buckets}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	if dir != "" {
		for _, chunk := range BucketChunks {
			CheckGolden(t, open(chunk, lm.DefaultBuckets), dir, tol)
		}
	}
	ids := make([]int, 21)
	for i := range ids {
		ids[i] = (i*7919 + 3) % m.Vocab()
	}
	s, exact := open(64, lm.DefaultBuckets), open(64, lm.BucketsOff)
	plans := 0
	for _, n := range []int{18, 21} {
		if b := lm.BucketRows(n, 64, lm.DefaultBuckets); b != 24 {
			t.Fatalf("%d rows run on a plan of %d, not of 24", n, b)
		}
		var res [2][]float32 // the bucket's plan's logits, then exact rows'
		for i, ses := range []models.Session{s, exact} {
			ses.Reset()
			out, err := ses.Forward(ids[:n], 0, lm.WantAll)
			if err != nil {
				t.Fatalf("%d rows: %v", n, err)
			}
			next, err := ses.Forward(ids[:1], n, lm.WantLast)
			if err != nil {
				t.Fatalf("a token after %d rows: %v", n, err)
			}
			ses.Reset()
			last, err := ses.Forward(ids[:n], 0, lm.WantLast) // the last row in use
			if err != nil {
				t.Fatalf("%d rows, the last's logits: %v", n, err)
			}
			res[i] = slices.Concat(out.Data().([]float32), next.Data().([]float32), last.Data().([]float32))
		}
		got, want := res[0], res[1]
		if len(got) != (n+2)*m.Vocab() || len(want) != len(got) {
			t.Fatalf("%d rows: %d and %d logits, want %d", n, len(got), len(want), (n+2)*m.Vocab())
		}
		var d float64
		for i := range want {
			d = max(d, math.Abs(float64(got[i]-want[i])))
		}
		if !(d < tol) {
			t.Fatalf("%d rows on a bucket's plan: |logit - exact rows'| %.3g: want below %g", n, d, tol)
		}
		t.Logf("%d rows on a bucket's plan: |logit - exact rows'| %.3g", n, d)
		if n == 18 {
			plans = s.Stats().Plans
		} else if p := s.Stats().Plans; p != plans {
			t.Fatalf("a prompt of 21 rows after one of 18 built %d plans: want none (one bucket of 24)", p-plans)
		}
	}
}

// Rewrite makes a ConfigCase Setup that writes the checkpoint src's
// tensors, changed by edit, into the case's folder.
func Rewrite(src string, edit func([]weights.NamedTensor) []weights.NamedTensor) func(testing.TB, string) {
	return func(t testing.TB, dir string) {
		t.Helper()
		if err := weights.Rewrite(src, dir, nil, edit); err != nil {
			t.Fatal(err)
		}
	}
}

// EditTensor makes a Setup that writes src's tensors with the one called
// name changed by f.
func EditTensor(src, name string, f func(*weights.NamedTensor)) func(testing.TB, string) {
	return Rewrite(src, func(ts []weights.NamedTensor) []weights.NamedTensor {
		for i := range ts {
			if ts[i].Name == name {
				f(&ts[i])
			}
		}
		return ts
	})
}

// StoreQuantized makes a Setup that writes the checkpoint src with the
// float matrices pick chooses stored quantized in q's format, as published
// FP8 checkpoints store theirs: a matrix's codes under its own name and its
// scales beside it (Quant.ScaleName), q's quantization_config in
// config.json.
func StoreQuantized(src string, q lm.Quant, pick func(name string) bool) func(testing.TB, string) {
	return func(t testing.TB, dir string) {
		t.Helper()
		quantize := func(ts []weights.NamedTensor) []weights.NamedTensor {
			var out []weights.NamedTensor
			for _, x := range ts {
				if !pick(x.Name) {
					out = append(out, x)
					continue
				}
				codes, scales, err := q.Quantize(lm.Tensor{DType: x.DType, Shape: x.Shape, Data: x.Data})
				if err != nil {
					t.Fatalf("%s: %v", x.Name, err)
				}
				out = append(out, weights.NamedTensor{Name: x.Name, DType: codes.DType, Shape: codes.Shape, Data: codes.Data},
					weights.NamedTensor{Name: q.ScaleName(x.Name), DType: scales.DType, Shape: scales.Shape, Data: scales.Data})
			}
			return out
		}
		if err := weights.Rewrite(src, dir, func(c map[string]any) { c["quantization_config"] = q.Config() }, quantize); err != nil {
			t.Fatal(err)
		}
	}
}

// Dequantized makes a Setup that writes the checkpoint src, stored
// quantized in fp8 or q8 (its config.json's quantization_config), as the
// float model its codes and scales stand for: every matrix of codes with
// its scales beside it dequantized to f32, the scales dropped and the
// quantization_config with them.
func Dequantized(src string) func(testing.TB, string) {
	return func(t testing.TB, dir string) {
		t.Helper()
		cfg, err := weights.ReadConfig(filepath.Join(src, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		q, err := lm.ReadQuant(cfg)
		if err != nil || q.Method == "" || q.Method == lm.QuantQ4 {
			t.Fatalf("%s: stored in %s (%v): want fp8 or q8", src, q, err)
		}
		dequantize := func(ts []weights.NamedTensor) []weights.NamedTensor {
			byName := map[string]weights.NamedTensor{}
			for _, x := range ts {
				byName[x.Name] = x
			}
			var out []weights.NamedTensor
			for _, x := range ts {
				if x.DType != q.DType() {
					if codes, ok := strings.CutSuffix(x.Name, q.ScaleName("")); !ok || byName[codes].DType != q.DType() {
						out = append(out, x) // not the scales of codes dequantized here
					}
					continue
				}
				sc, ok := byName[q.ScaleName(x.Name)]
				if n := len(x.Shape); ok && n >= 2 {
					v, err := q.Dequantize(lm.Tensor{DType: x.DType, Shape: x.Shape, Data: x.Data},
						lm.Tensor{DType: sc.DType, Shape: sc.Shape, Data: sc.Data}, x.Shape[n-2], x.Shape[n-1])
					if err == nil {
						out = append(out, weights.NamedTensor{Name: x.Name, DType: graph.F32, Shape: x.Shape, Data: weights.EncodeF32(v)})
						continue
					}
					t.Fatalf("%s: %v", x.Name, err)
				}
				t.Fatalf("%s: codes %v without their scales", x.Name, x.Shape)
			}
			return out
		}
		if err := weights.Rewrite(src, dir, func(c map[string]any) { delete(c, "quantization_config") }, dequantize); err != nil {
			t.Fatal(err)
		}
	}
}

// Validated is a FuzzConfig read of a loader that reads a config with
// fromJSON and checks it again with its Validate: a config fromJSON
// accepts and Validate refuses is the error.
func Validated[C any, P interface {
	*C
	Validate() error
}](fromJSON func(*weights.Config) (C, error)) func(*weights.Config) (any, error) {
	return func(cfg *weights.Config) (any, error) {
		c, err := fromJSON(cfg)
		if err != nil {
			return nil, nil // refused
		}
		if err := P(&c).Validate(); err != nil {
			return nil, fmt.Errorf("the loader accepted a config that Validate refuses: %w", err)
		}
		return c, nil
	}
}

// FuzzConfig fuzzes a model's config.json on a copy of the checkpoint src,
// under the budget b. read reads a config as the model's loader does: nil
// for a config it refuses (fine), or the config it accepts (an error for an
// accepted config it should have refused). An accepted config is written
// into the copy and load (a model's Load, a session, one token) runs once
// per distinct config: it may refuse the checkpoint, but logits it gives
// must be finite. Never a panic, a hang or an allocation past the budget.
func FuzzConfig(f *testing.F, src string, b weightstest.Budget, read func(*weights.Config) (any, error), load func(dir string) ([]float32, error)) {
	dir := weightstest.CopyDir(f, src)
	path := filepath.Join(dir, "config.json")
	ran := map[string]bool{} // configs whose forward has run, in this process
	f.Fuzz(func(t *testing.T, data []byte) {
		err := weightstest.Run(t, b, func() error {
			cfg, err := weights.ParseConfig(path, data)
			if err != nil {
				return nil
			}
			c, err := read(cfg)
			if c == nil || err != nil {
				return err
			}
			key := fmt.Sprintf("%+v", c)
			if ran[key] {
				return nil
			}
			ran[key] = true
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
			logits, err := load(dir)
			if err != nil {
				return nil
			}
			for i, x := range logits {
				if x != x || x > 3.4e38 || x < -3.4e38 {
					return fmt.Errorf("loaded, but logit %d is %v", i, x)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
