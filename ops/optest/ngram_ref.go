package optest

import (
	"math"

	"github.com/reel-runtime/reel/ops"
)

// Float64 references of the hashed n-gram embedding (PLE) ops.

// refPLEHash follows the reference code: the token history is the last n−1
// tokens before the call (EOS before position 0) and the call's ids; the
// token s steps back is replaced by EOS unless it lies in the current
// segment (after the last EOS before the token) and in the history.
func refPLEHash(ids, hist []float64, a ops.PLEHashAttrs, pos, used int) (rows, hist2 []float64) {
	n, hp := a.NGram, a.HeadsPerNGram
	ctx, nh := n-1, (n-1)*a.HeadsPerNGram
	eos := int64(a.EOS)
	var h []int64
	for j := pos - ctx; j < pos; j++ {
		if j < 0 {
			h = append(h, eos)
		} else {
			h = append(h, int64(hist[j%ctx]))
		}
	}
	for _, id := range ids[:used] {
		h = append(h, int64(id))
	}
	shifted := func(i, s int) int64 {
		start := 0 // the segment of i starts after the last EOS before i
		for j := 0; j < i; j++ {
			if h[j] == eos {
				start = j + 1
			}
		}
		if i-start >= s && i-s >= 0 {
			return h[i-s]
		}
		return eos
	}
	rows = make([]float64, len(ids)*nh)
	for t := 0; t < used; t++ {
		i := ctx + t
		mix := shifted(i, 0) * a.Mult[0]
		for o := 2; o <= n; o++ {
			mix ^= shifted(i, o-1) * a.Mult[o-1]
			for e := 0; e < hp; e++ {
				hd := (o-2)*hp + e
				r := ((mix % a.Sizes[hd]) + a.Sizes[hd]) % a.Sizes[hd]
				rows[t*nh+hd] = float64(r + a.Offsets[hd])
			}
		}
	}
	hist2 = append([]float64(nil), hist...)
	for t := 0; t < used; t++ {
		hist2[(pos+t)%ctx] = ids[t]
	}
	return rows, hist2
}

// refNGramEmbed gathers rows of the concatenated shards.
func refNGramEmbed(rows []float64, w int, shards ...[]float64) []float64 {
	var table []float64
	for _, s := range shards {
		table = append(table, s...)
	}
	return refEmbed(table, w, rows)
}

// refPLEGate is sigmoid(sign(γ) sqrt(max(|γ|, 1e-6))) v per stream, γ = kn_c·qn_c / sqrt(H).
func refPLEGate(kn, qn, v []float64, c, h int) []float64 {
	y := make([]float64, len(kn))
	for t := 0; t < len(v)/h; t++ {
		for s := 0; s < c; s++ {
			o := (t*c + s) * h
			var g float64
			for i := 0; i < h; i++ {
				g += kn[o+i] * qn[o+i]
			}
			g /= math.Sqrt(float64(h))
			sg := 0.0
			if g > 0 {
				sg = 1
			} else if g < 0 {
				sg = -1
			}
			g = sg * math.Sqrt(math.Max(math.Abs(g), 1e-6))
			for i := 0; i < h; i++ {
				y[o+i] = refSigmoid(g) * v[t*h+i]
			}
		}
	}
	return y
}
