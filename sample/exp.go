package sample

import "math"

// expTable holds 2^(j/expN) for j in 0..expN−1.
const expN = 256

var expTable = func() (t [expN]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / expN)
	}
	return t
}()

// expNeg is e^z for z ≤ 0, within a few ulps of math.Exp, and 0 below
// −708 (where math.Exp gives subnormals: weights that no float64 draw can
// tell from 0 beside the top token's 1). It is about three times faster
// than math.Exp, which matters when a step weighs a whole vocabulary.
//
// The method is Tang's: z = (256m + j)·ln2/256 + r with |r| ≤ ln2/512, so
// e^z = 2^m · 2^(j/256) · e^r, and e^r is its Taylor polynomial of degree 4
// (error below r^5/5! < 4e-17). ln2/256 is split in two, the first part
// with enough trailing zero bits that k times it is exact.
func expNeg(z float64) float64 {
	const (
		invLn2xN = expN / math.Ln2
		ln2Hi    = 6.93147180369123816490e-01 / expN // math's Ln2Hi: 32 significant bits
		ln2Lo    = 1.90821492927058770002e-10 / expN
	)
	if !(z >= -708) { // also NaN
		return 0
	}
	k := int(z*invLn2xN - 0.5) // rounds to nearest: z ≤ 0 and int() truncates toward 0
	r := z - float64(k)*ln2Hi - float64(k)*ln2Lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24))))
	m := k >> 8 // floor(k/256): k ≥ −261489, so m ≥ −1022, a normal exponent
	return math.Float64frombits(uint64(m+1023)<<52) * expTable[k&(expN-1)] * p
}
