package optest

// Float64 references of the gated residual (hyper-connection) stream ops.

// refHCMix is (1/C) Σ_c sigmoid(g_c) xn_c.
func refHCMix(xn, g []float64, c, h int) []float64 {
	rows := len(xn) / (c * h)
	u := make([]float64, rows*h)
	for t := 0; t < rows; t++ {
		for i := 0; i < h; i++ {
			for s := 0; s < c; s++ {
				o := t*c*h + s*h + i
				u[t*h+i] += refSigmoid(g[o]) * xn[o] / float64(c)
			}
		}
	}
	return u
}

// refHCInject is x_c + 2 sigmoid(l_c / C) y.
func refHCInject(x, y, l []float64, c, h int) []float64 {
	out := make([]float64, len(x))
	for i := range x {
		t, s, j := i/(c*h), i/h%c, i%h
		out[i] = x[i] + 2*refSigmoid(l[t*c+s]/float64(c))*y[t*h+j]
	}
	return out
}

// refHCExpand tiles rows of h c times.
func refHCExpand(x []float64, c, h int) []float64 {
	var out []float64
	for t := 0; t < len(x)/h; t++ {
		for s := 0; s < c; s++ {
			out = append(out, x[t*h:(t+1)*h]...)
		}
	}
	return out
}
