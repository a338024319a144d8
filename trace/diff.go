package trace

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Metric is what Diff holds against the tolerance.
type Metric int

// The metrics.
const (
	// Abs is the largest absolute difference of two values' elements.
	Abs Metric = iota
	// NMSE is the squared error over the squared norm of the first value:
	// Σ(a−b)² / Σa².
	NMSE
)

// String names the metric as --metric takes it.
func (m Metric) String() string {
	if m == NMSE {
		return "nmse"
	}
	return "abs"
}

// ParseMetric reads "abs" or "nmse".
func ParseMetric(s string) (Metric, error) {
	switch s {
	case "abs":
		return Abs, nil
	case "nmse":
		return NMSE, nil
	}
	return 0, fmt.Errorf("unknown metric %q (want abs or nmse)", s)
}

// Comparison is one value of the first recording against the second.
type Comparison struct {
	// Name, Op and Call are the first recording's.
	Name, Op string
	Call     int
	// Pos and Rows are the positions compared (Pos -1: the whole value,
	// aligned by call).
	Pos, Rows int
	// Elems is the number of elements compared.
	Elems  int
	MaxAbs float64
	NMSE   float64
	// Past says the metric is past the tolerance (or not a number).
	Past bool
	// Err says why the value could not be compared (Elems is then 0).
	Err string
}

// Report is what Diff found.
type Report struct {
	Tol    float64
	Metric Metric
	// Compared are the comparisons, in the first recording's order.
	Compared []Comparison
	// First is the index in Compared of the first one past the tolerance,
	// or -1.
	First int
	// OnlyA and OnlyB count the names only one recording has; Unaligned the
	// records of the first whose name the second has, but whose calls and
	// positions match none of the second's.
	OnlyA, OnlyB, Unaligned int
}

// Diverged says whether a comparison is past the tolerance.
func (r Report) Diverged() bool { return r.First >= 0 }

// Diff aligns two recordings by name and call and compares them in the
// first one's order. A record of a matches the record of b of the same
// name, call, positions and shape; failing that, when both hold a row per
// position (Record.PerRow) of equal width, its rows are compared with b's
// rows of the same positions, whatever calls made them (a chunked run
// against a whole one, Reel against transformers).
func Diff(a, b []Record, tol float64, m Metric) Report {
	rep := Report{Tol: tol, Metric: m, First: -1}
	byName := map[string][]*Record{}
	for i := range b {
		byName[b[i].Name] = append(byName[b[i].Name], &b[i])
	}
	decoded := map[*Record][]float64{}
	dec := func(r *Record) ([]float64, error) {
		if x, ok := decoded[r]; ok {
			return x, nil
		}
		x, err := r.Floats()
		if err == nil {
			decoded[r] = x
		}
		return x, err
	}
	inA := map[string]bool{}
	for i := range a {
		ra := &a[i]
		inA[ra.Name] = true
		cands := byName[ra.Name]
		if len(cands) == 0 {
			rep.OnlyA++
			continue
		}
		c, ok := compareRecord(ra, cands, dec)
		if !ok {
			rep.Unaligned++
			continue
		}
		c.Past = c.Err != "" || !(metric(c, m) <= tol)
		if c.Past && rep.First < 0 {
			rep.First = len(rep.Compared)
		}
		rep.Compared = append(rep.Compared, c)
	}
	for name := range byName {
		if !inA[name] {
			rep.OnlyB++
		}
	}
	return rep
}

func metric(c Comparison, m Metric) float64 {
	if m == NMSE {
		return c.NMSE
	}
	return c.MaxAbs
}

// compareRecord compares ra with the records of its name in the other
// recording (decoded once each, through dec); false when none aligns.
func compareRecord(ra *Record, cands []*Record, dec func(*Record) ([]float64, error)) (Comparison, bool) {
	c := Comparison{Name: ra.Name, Op: ra.Op, Call: ra.Call, Pos: -1}
	for _, rb := range cands {
		if rb.Call == ra.Call && rb.Pos == ra.Pos && rb.Rows == ra.Rows && slices.Equal(rb.Shape, ra.Shape) {
			xa, xb, err := floatsOf(ra, rb, dec)
			if err != nil {
				c.Err = err.Error()
				return c, true
			}
			c.Elems, c.MaxAbs, c.NMSE = compare(xa, xb)
			return c, true
		}
	}
	if !ra.PerRow() {
		return c, false
	}
	xa, err := dec(ra)
	if err != nil {
		c.Err = err.Error()
		return c, true
	}
	rw := len(xa) / ra.Rows
	var ya, yb []float64
	first, last := -1, -1
	for r := 0; r < ra.Rows; r++ {
		p := ra.Pos + r
		row := rowAt(cands, p, rw, dec)
		if row == nil {
			continue
		}
		if first < 0 {
			first = p
		}
		last = p
		ya = append(ya, xa[r*rw:(r+1)*rw]...)
		yb = append(yb, row...)
	}
	if first < 0 {
		return c, false
	}
	c.Pos, c.Rows = first, last-first+1
	c.Elems, c.MaxAbs, c.NMSE = compare(ya, yb)
	return c, true
}

// rowAt finds position p among the per-row records cands whose rows hold
// rw elements, and gives that row.
func rowAt(cands []*Record, p, rw int, dec func(*Record) ([]float64, error)) []float64 {
	for _, rb := range cands {
		if !rb.PerRow() || p < rb.Pos || p >= rb.Pos+rb.Rows {
			continue
		}
		xb, err := dec(rb)
		if err != nil || len(xb) != rb.Rows*rw {
			continue
		}
		r := p - rb.Pos
		return xb[r*rw : (r+1)*rw]
	}
	return nil
}

// floatsOf decodes two records.
func floatsOf(ra, rb *Record, dec func(*Record) ([]float64, error)) (xa, xb []float64, err error) {
	if xa, err = dec(ra); err != nil {
		return nil, nil, err
	}
	if xb, err = dec(rb); err != nil {
		return nil, nil, err
	}
	if len(xa) != len(xb) {
		return nil, nil, fmt.Errorf("%d elements against %d", len(xa), len(xb))
	}
	return xa, xb, nil
}

// compare gives the elements compared, the largest absolute difference and
// the NMSE of b against a. Two NaNs, or two infinities of one sign, in one
// place are equal; any other non-finite difference is infinite.
func compare(a, b []float64) (n int, maxAbs, nmse float64) {
	var se, sa float64
	for i := range a {
		x, y := a[i], b[i]
		var d float64
		switch {
		case math.IsNaN(x) || math.IsNaN(y):
			if !(math.IsNaN(x) && math.IsNaN(y)) {
				d = math.Inf(1)
			}
		case math.IsInf(x, 0) || math.IsInf(y, 0):
			if x != y {
				d = math.Inf(1)
			}
		default:
			d = math.Abs(x - y)
			sa += x * x
		}
		maxAbs = max(maxAbs, d)
		se += d * d
	}
	switch {
	case se == 0:
		nmse = 0
	case sa == 0:
		nmse = math.Inf(1)
	default:
		nmse = se / sa
	}
	return len(a), maxAbs, nmse
}

// WriteTo writes the report as reel trace --diff prints it: the first line
// names the first divergence ("first divergence: NAME (op OP, max abs X,
// nmse Y)") or says there is none ("no divergence past TOL"); then a line
// per comparison, in graph order, those past the tolerance marked; then
// the counts.
func (r *Report) WriteTo(w io.Writer) (int64, error) {
	var sb strings.Builder
	if r.First >= 0 {
		c := r.Compared[r.First]
		fmt.Fprintf(&sb, "first divergence: %s (op %s, max abs %.4g, nmse %.4g)\n", c.Name, c.Op, c.MaxAbs, c.NMSE)
	} else {
		fmt.Fprintf(&sb, "no divergence past %g\n", r.Tol)
	}
	width := 0
	for _, c := range r.Compared {
		width = max(width, len(c.Name))
	}
	past := 0
	for _, c := range r.Compared {
		mark := ""
		if c.Past {
			mark = "  past " + fmt.Sprint(r.Tol)
			past++
		}
		where := fmt.Sprintf("call %d", c.Call)
		if c.Pos >= 0 {
			where = "pos " + posRange(c.Pos, c.Rows)
		}
		if c.Err != "" {
			fmt.Fprintf(&sb, "%-*s  %-10s %-20s %s%s\n", width, c.Name, where, c.Op, c.Err, mark)
			continue
		}
		fmt.Fprintf(&sb, "%-*s  %-10s %-20s max abs %-10.4g nmse %.4g%s\n", width, c.Name, where, c.Op, c.MaxAbs, c.NMSE, mark)
	}
	fmt.Fprintf(&sb, "compared %d values (%s): %d past %g; %d names only in the first, %d only in the second, %d records not aligned\n",
		len(r.Compared), r.Metric, past, r.Tol, r.OnlyA, r.OnlyB, r.Unaligned)
	n, err := io.WriteString(w, sb.String())
	return int64(n), err
}
