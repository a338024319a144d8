package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
)

// TestCheckFinite: check_finite finds one NaN or infinity at any place of a
// buffer (the float4 body and the tail, aligned or not), finds nothing in
// finite values (the largest and the subnormal included) or past the
// values it checks, and the Read after it reports what it found once,
// with the data read, the record clear for the next.
func TestCheckFinite(t *testing.T) {
	be := newTestBackend(t, Options{})
	const size = 70001
	arena, err := be.Arena(4 * (size + 8))
	require.NoError(t, err)
	t.Cleanup(func() { be.Free(arena) })
	vals := make([]float32, size)
	for i := range vals {
		vals[i] = float32(i%13) - 6.5
	}
	vals[17] = math.MaxFloat32
	vals[18] = -math.SmallestNonzeroFloat32
	for _, off := range []int{0, 1, 3} { // in floats: 16-byte aligned or not
		for _, n := range []int{1, 7, 4096, size} {
			b, err := be.View(arena, 4*off, graph.F32, n)
			require.NoError(t, err)
			write := func(x []float32) {
				raw := make([]byte, 4*len(x))
				for i, v := range x {
					binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
				}
				require.NoError(t, be.Write(b, raw))
			}
			read := func() ([]byte, error) {
				raw := make([]byte, 4*n)
				return raw, be.Read(b, raw)
			}
			write(vals[:n])
			require.NoError(t, be.CheckFinite(b, n))
			_, err = read()
			require.NoError(t, err, "finite values, offset %d, n %d", off, n)
			for _, at := range []int{0, n / 2, n - 1} {
				for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
					t.Run(fmt.Sprintf("off%d_n%d_at%d_%v", off, n, at, bad), func(t *testing.T) {
						x := append([]float32(nil), vals[:n]...)
						x[at] = bad
						write(x)
						if at > 0 {
							require.NoError(t, be.CheckFinite(b, at), "the values before it")
							_, err := read()
							require.NoError(t, err)
						}
						require.NoError(t, be.CheckFinite(b, n))
						raw, err := read()
						require.True(t, errors.Is(err, ops.ErrNotFinite), "got %v", err)
						require.Equal(t, math.Float32bits(bad), binary.LittleEndian.Uint32(raw[4*at:]), "the data comes with the error")
						_, err = read()
						require.NoError(t, err, "the record is clear after it was reported")
					})
				}
			}
		}
	}
	i32, err := be.Alloc(graph.I32, 4)
	require.NoError(t, err)
	defer be.Free(i32)
	require.Error(t, be.CheckFinite(i32, 4), "an i32 buffer")
	f, err := be.Alloc(graph.F32, 4)
	require.NoError(t, err)
	defer be.Free(f)
	require.Error(t, be.CheckFinite(f, 5), "more values than the buffer holds")
}
