package lm

import "fmt"

// Row buckets: a plan is built, and on CUDA recorded, per key, and a
// forward chunk's key holds its rows, so every new prompt length would
// build a plan of its own (on the H200, Dory 4B's first 2048-token prompt
// takes about 217 ms against 70 to 90 once its plan is recorded). A
// session instead runs a chunk of n rows on the plan of BucketRows(n)
// rows: the ids padded, the call record saying n rows. Every op that
// writes state computes only the call's rows (kv_write stores no padding
// row, attention and the scans leave them zero, ops/check.go), so the
// padding changes nothing the session keeps, and the head reads the last
// row in use (ops.LastRow).
const (
	// ExactRows is the most rows a chunk runs on a plan of its own size:
	// decode tokens and speculation windows (the CUDA matvec kernels take
	// 1 to 8 rows), whose plans run over and over at the same size.
	ExactRows = 8
	// MinBucket is the rows of the smallest bucket: the fewest rows for
	// which the CUDA backend takes the tensor cores
	// (ops.AttentionChunkRows).
	MinBucket = 16
	// DefaultBuckets is the buckets per doubling of rows on a backend that
	// records plans unless a session says otherwise (SessionOptions.Buckets):
	// 16, 24, 32, 48, 64, 96, ... (at most a third of a
	// plan's rows padding, for two plans per doubling; one per doubling
	// pads up to half, and leaves half the plans to build and keep).
	DefaultBuckets = 2
	// MaxBuckets is the most buckets per doubling a session takes.
	MaxBuckets = 8
	// BucketsOff, as SessionOptions.Buckets, runs every chunk on a plan of
	// its own rows (any negative value does).
	BucketsOff = -1
)

// BucketRows is the rows of the plan a chunk of n rows runs in a session
// of chunks of at most chunk rows, with steps buckets per doubling (0:
// DefaultBuckets; negative: none, n itself). A chunk of at most ExactRows
// rows, or of chunk rows or more, runs on its own size; any other on the
// smallest bucket of MinBucket·2^k·(1 + i/steps) rows (i < steps) that
// holds it, capped at chunk.
func BucketRows(n, chunk, steps int) int {
	if steps < 0 || n <= ExactRows || n >= chunk {
		return n
	}
	if steps == 0 {
		steps = DefaultBuckets
	}
	for lo := MinBucket; ; lo *= 2 {
		for i := range steps {
			if b := lo + lo*i/steps; b >= n {
				return min(b, chunk)
			}
		}
	}
}

// checkBuckets checks a session's buckets per doubling (negative: off).
func checkBuckets(steps int) error {
	if steps > MaxBuckets {
		return fmt.Errorf("%d row buckets per doubling: want at most %d (or a negative number: none)", steps, MaxBuckets)
	}
	return nil
}

// Buckets is the row buckets per doubling the session's chunks run on
// (SessionOptions.Buckets with its default resolved; negative: none).
func (s *Session) Buckets() int { return s.opts.Buckets }

// PlanRows is the rows of the plan a forward chunk of n rows runs on
// (BucketRows with the session's chunk and buckets); a speculation
// window's chunks run on their own size, as its tapes and its Settle
// read the window's rows.
func (s *Session) PlanRows(n int) int {
	if s.windowed {
		return n
	}
	return BucketRows(n, s.opts.Chunk, s.opts.Buckets)
}

// padded gives data padded with zeros to n values (data itself when it has
// them): an input of a plan built for a bucket of rows. More values than n
// is an error naming the input.
func padded[T int | float32](name string, data []T, n int) ([]T, error) {
	switch {
	case len(data) == n:
		return data, nil
	case len(data) > n:
		return nil, fmt.Errorf("input %s: %d values for a plan input of %d", name, len(data), n)
	}
	out := make([]T, n)
	copy(out, data)
	return out, nil
}
