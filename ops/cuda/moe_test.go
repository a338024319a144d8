package cuda

import (
	"math/rand/v2"
	"testing"
)

// TestMoEMaxTiles needs no device: the tensor-core expert product's grid
// (moeMaxTiles) covers the tiles of every routing, exactly when each
// expert with units has one past whole tiles.
func TestMoEMaxTiles(t *testing.T) {
	tiles := func(counts []int) int {
		n := 0
		for _, c := range counts {
			n += (c + moeMMAUnits - 1) / moeMMAUnits
		}
		return n
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range [][2]int{{1, 1}, {5, 64}, {64, 1}, {65, 1}, {130, 5}, {520, 9}, {5120, 64}, {5120, 512}, {40, 7}} {
		units, e := s[0], s[1]
		bound := moeMaxTiles(units, e)
		for range 200 {
			counts := make([]int, e)
			spread := 1 + r.IntN(e)
			for range units {
				counts[r.IntN(spread)]++
			}
			if n := tiles(counts); n > bound {
				t.Fatalf("%d units over %d experts %v: %d tiles, over moeMaxTiles %d", units, e, counts, n, bound)
			}
		}
	}
	for _, s := range [][2]int{{9, 9}, {65 * 7, 7}, {129 * 3, 3}} {
		units, e := s[0], s[1]
		counts := make([]int, e)
		for i := range counts {
			counts[i] = units / e
		}
		if n, bound := tiles(counts), moeMaxTiles(units, e); n != bound {
			t.Errorf("%d units, %d to each of %d experts: %d tiles, moeMaxTiles %d", units, units/e, e, n, bound)
		}
	}
}
