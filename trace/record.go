// Package trace records the values a model's plans compute, node by node,
// and compares two recordings to find where two runs part (reel trace).
//
// A Recorder instruments every plan of a session through the planner's
// Options.Trace: the outputs of the nodes whose names it matches stay in
// the arena until the run ends and are copied to the host after it, one
// Record per value per run (a call). Names are the paths of graph values
// (graph.Value.Path: the scope of the node that made the value and the
// value's label, "layer 2 / attn / attn_out"), so a fused and an unfused
// plan, a CPU and a CUDA run, or Reel and a reference implementation that
// writes the same names (tools/trace_hf.py) line up. Write and Read keep
// recordings in safetensors files; Diff compares two.
package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/half"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
)

// Record is one traced value of one run.
type Record struct {
	// Name is the value's path ("layer 2 / attn / attn_out").
	Name string
	// Op is the op of the node that made it (a fused op with fusion on);
	// Scope that node's scope; Graph the name of the planned graph.
	Op, Scope, Graph string
	// Call counts the runs of the recording, from 0; Index counts the
	// records, in the order they were made (graph order within a call).
	Call, Index int
	// Pos and Rows are the call record's position and rows: the run
	// computed positions [Pos, Pos+Rows). Pos is -1 when the graph has no
	// call record.
	Pos, Rows int
	DType     graph.DType
	Shape     []int
	// Data are the value's little-endian bytes.
	Data []byte
}

// PerRow says whether the record holds one row per position of its call
// (its first extent is the call's rows), so that row i is position Pos+i.
func (r *Record) PerRow() bool {
	return r.Pos >= 0 && r.Rows > 0 && len(r.Shape) > 0 && r.Shape[0] == r.Rows && len(r.Data) > 0
}

// Floats decodes the record's data as float64 (any float or integer dtype).
func (r *Record) Floats() ([]float64, error) { return decode(r.DType, r.Data) }

// DefaultMaxBytes is the most data a Recorder keeps when MaxBytes is 0.
const DefaultMaxBytes = 1 << 30

// ErrNonFinite is the error a Recorder with FirstNonFinite stops the run
// with when a traced value holds a NaN or an infinity; the Recorder's
// NonFinite then says where.
var ErrNonFinite = errors.New("trace: a value is not finite")

// Recorder keeps the values an instrumented plan hands back after each of
// its runs. Give Planner's options to a session (lm.Options.Planner):
// every plan the session makes is then instrumented, and each run
// appended to the recording as one call. A Recorder is not safe for
// concurrent use.
type Recorder struct {
	// Match says whether to keep a value by its name; nil keeps every one.
	Match func(name string) bool
	// MaxBytes bounds the data kept (0: DefaultMaxBytes); past it a run
	// fails with an error saying so.
	MaxBytes int64
	// FirstNonFinite stops at the first traced value that holds a NaN or
	// an infinity: the run fails with ErrNonFinite and NonFinite says
	// which value, with the ranges of its node's inputs.
	FirstNonFinite bool

	records []Record
	bytes   int64
	calls   int
	found   *NonFinite
}

// Planner gives base with the trace of r set: the planner options of a
// session that records into r.
func (r *Recorder) Planner(base planner.Options) *planner.Options {
	base.Trace = &planner.Trace{Match: r.Match, Observe: r.observe}
	return &base
}

// Records are the values recorded so far, in order.
func (r *Recorder) Records() []Record { return r.records }

// Calls is the number of runs recorded.
func (r *Recorder) Calls() int { return r.calls }

// NonFinite is the first value found holding a NaN or an infinity (with
// FirstNonFinite), or nil.
func (r *Recorder) NonFinite() *NonFinite { return r.found }

// observe copies the traced values of a run.
func (r *Recorder) observe(pl *planner.Lowered) error {
	p, be := pl.Planned(), pl.Backend()
	call := r.calls
	r.calls++
	pos, rows, err := callRecord(pl)
	if err != nil {
		return err
	}
	limit := r.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	kept := map[*graph.Value]*Record{}
	first := len(r.records)
	for i, buf := range pl.Traced() {
		tp := p.Traced[i]
		v := tp.Value
		n := v.Bytes()
		if r.bytes+int64(n) > limit {
			return fmt.Errorf("trace: more than %d bytes of values (at %s, call %d): match fewer nodes or trace fewer ids", limit, tp.Name, call)
		}
		data := make([]byte, n)
		if err := be.Read(buf, data); err != nil {
			return fmt.Errorf("trace: reading %s: %w", tp.Name, err)
		}
		r.bytes += int64(n)
		r.records = append(r.records, Record{
			Name: tp.Name, Op: tp.Node.Op, Scope: tp.Node.Scope, Graph: p.Graph.Name,
			Call: call, Index: len(r.records), Pos: pos, Rows: rows,
			DType: v.DType, Shape: append([]int(nil), v.Shape...), Data: data,
		})
	}
	if !r.FirstNonFinite {
		return nil
	}
	for i := first; i < len(r.records); i++ {
		kept[p.Traced[i-first].Value] = &r.records[i]
	}
	for i := first; i < len(r.records); i++ {
		rec := &r.records[i]
		st, err := stats(rec.DType, rec.Data)
		if err != nil || st.NaN+st.Inf == 0 {
			continue
		}
		r.found = &NonFinite{Record: *rec, Stats: st, Inputs: inputRanges(pl, p.Traced[i-first].Node, kept)}
		return fmt.Errorf("%w: %s (op %s, call %d)", ErrNonFinite, rec.Name, rec.Op, call)
	}
	return nil
}

// callRecord reads the position and rows of a run from its call record;
// -1 and 0 when the graph has none.
func callRecord(pl *planner.Lowered) (pos, rows int, err error) {
	v := pl.Planned().Graph.Lookup(ops.CallName)
	if v == nil || v.Kind != graph.Input {
		return -1, 0, nil
	}
	buf := pl.Buffer(v)
	if buf == nil || buf.Len() < ops.CallLen {
		return -1, 0, nil
	}
	raw := make([]byte, 4*ops.CallLen)
	if err := pl.Backend().Read(buf, raw); err != nil {
		return 0, 0, fmt.Errorf("trace: reading the call record: %w", err)
	}
	word := func(i int) int { return int(int32(binary.LittleEndian.Uint32(raw[4*i:]))) }
	return word(ops.CallPos), word(ops.CallRows), nil
}

// Stats summarize a value: its least and greatest finite elements and how
// many are NaN or infinite.
type Stats struct {
	Elems    int
	Min, Max float64
	NaN, Inf int
}

// String writes "min -1.2, max 3.4" with the non-finite counts after.
func (s Stats) String() string {
	out := "no finite element"
	if s.Elems > s.NaN+s.Inf {
		out = fmt.Sprintf("min %.4g, max %.4g", s.Min, s.Max)
	}
	if s.NaN > 0 {
		out += fmt.Sprintf(", %d NaN", s.NaN)
	}
	if s.Inf > 0 {
		out += fmt.Sprintf(", %d Inf", s.Inf)
	}
	return out
}

// stats computes a value's Stats.
func stats(dt graph.DType, data []byte) (Stats, error) {
	xs, err := decode(dt, data)
	if err != nil {
		return Stats{}, err
	}
	s := Stats{Elems: len(xs), Min: math.Inf(1), Max: math.Inf(-1)}
	for _, x := range xs {
		switch {
		case math.IsNaN(x):
			s.NaN++
		case math.IsInf(x, 0):
			s.Inf++
		default:
			s.Min, s.Max = min(s.Min, x), max(s.Max, x)
		}
	}
	return s, nil
}

// NonFinite is the first traced value found holding a NaN or an infinity.
type NonFinite struct {
	Record Record
	Stats  Stats
	// Inputs are the node's inputs, in order.
	Inputs []Input
}

// Input is an input of the node that made a non-finite value.
type Input struct {
	// Name is the input's path; Kind, DType and Shape describe it.
	Name  string
	Kind  graph.Kind
	DType graph.DType
	Shape graph.Shape
	// Stats is its range; Note says why there is none (a temporary the
	// trace did not keep), or that a state was read after the run.
	Stats Stats
	Note  string
}

// String writes the report of reel trace --first-nonfinite: the value,
// then a line per input of its node with its range.
func (n *NonFinite) String() string {
	var sb strings.Builder
	r := n.Record
	fmt.Fprintf(&sb, "first non-finite: %s (op %s, call %d, positions %s): %s of %d elements, %s%v\n",
		r.Name, r.Op, r.Call, posRange(r.Pos, r.Rows), n.Stats.String(), n.Stats.Elems, r.DType, r.Shape)
	for i, in := range n.Inputs {
		what := in.Stats.String()
		if in.Note != "" {
			if in.Stats.Elems > 0 {
				what += " (" + in.Note + ")"
			} else {
				what = in.Note
			}
		}
		fmt.Fprintf(&sb, "  input %d: %s %s %s%v: %s\n", i, in.Kind, in.Name, in.DType, in.Shape, what)
	}
	return sb.String()
}

// posRange writes positions [pos, pos+rows) as "0-3", or "?" without a
// call record.
func posRange(pos, rows int) string {
	if pos < 0 {
		return "?"
	}
	return fmt.Sprintf("%d-%d", pos, pos+rows-1)
}

// inputRanges gives the ranges of n's inputs after the run: kept
// temporaries from their records, leaves from their buffers.
func inputRanges(pl *planner.Lowered, n *graph.Node, kept map[*graph.Value]*Record) []Input {
	p := pl.Planned()
	var out []Input
	for _, v := range n.Inputs {
		in := Input{Name: v.Name, Kind: v.Kind, DType: v.DType, Shape: v.Shape}
		var data []byte
		switch {
		case v.Kind == graph.Temp:
			if src := p.SourceValue(v); src != nil {
				in.Name = src.Path()
			}
			rec := kept[v]
			if rec == nil {
				in.Note = "not traced (outside --match)"
				out = append(out, in)
				continue
			}
			in.Name, data = rec.Name, rec.Data
		default:
			buf := pl.Buffer(v)
			if buf == nil {
				in.Note = "not bound"
				out = append(out, in)
				continue
			}
			data = make([]byte, buf.Len()*v.DType.Size()/max(v.DType.BlockLen(), 1))
			if err := pl.Backend().Read(buf, data); err != nil {
				in.Note = "unreadable: " + err.Error()
				out = append(out, in)
				continue
			}
			if v.Kind == graph.State {
				in.Note = "as the run left it"
			}
		}
		st, err := stats(v.DType, data)
		if err != nil {
			in.Note = err.Error()
		}
		in.Stats = st
		out = append(out, in)
	}
	return out
}

// decode reads little-endian elements of dt as float64.
func decode(dt graph.DType, data []byte) ([]float64, error) {
	size := dt.Size()
	if size == 0 || dt.BlockLen() != 1 || len(data)%size != 0 {
		return nil, fmt.Errorf("values of dtype %s cannot be compared", dt)
	}
	n := len(data) / size
	out := make([]float64, n)
	switch dt {
	case graph.F32:
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
		}
	case graph.BF16:
		for i := range out {
			out[i] = float64(half.BF16ToF32(binary.LittleEndian.Uint16(data[2*i:])))
		}
	case graph.F16:
		for i := range out {
			out[i] = float64(half.F16ToF32(binary.LittleEndian.Uint16(data[2*i:])))
		}
	case graph.I32:
		for i := range out {
			out[i] = float64(int32(binary.LittleEndian.Uint32(data[4*i:])))
		}
	case graph.I64:
		for i := range out {
			out[i] = float64(int64(binary.LittleEndian.Uint64(data[8*i:])))
		}
	default:
		return nil, fmt.Errorf("values of dtype %s cannot be compared", dt)
	}
	return out, nil
}

// Glob makes a Match from shell-style patterns, any of which may match: *
// matches any run of characters (slashes included), ? any one character,
// [...] a class as in path.Match. An empty list matches everything.
func Glob(patterns ...string) (func(name string) bool, error) {
	var res []*regexp.Regexp
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("pattern %q: %w", p, err)
		}
		var sb strings.Builder
		sb.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch c := p[i]; c {
			case '*':
				sb.WriteString(".*")
			case '?':
				sb.WriteString(".")
			case '[':
				j := strings.IndexByte(p[i:], ']')
				class := p[i+1 : i+j]
				if strings.HasPrefix(class, "^") {
					class = "^" + regexp.QuoteMeta(class[1:])
				} else {
					class = regexp.QuoteMeta(class)
				}
				sb.WriteString("[" + strings.ReplaceAll(class, `\-`, "-") + "]")
				i += j
			case '\\':
				if i+1 < len(p) {
					i++
				}
				sb.WriteString(regexp.QuoteMeta(p[i : i+1]))
			default:
				sb.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		sb.WriteString("$")
		re, err := regexp.Compile(sb.String())
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", p, err)
		}
		res = append(res, re)
	}
	return func(name string) bool {
		if len(res) == 0 {
			return true
		}
		for _, re := range res {
			if re.MatchString(name) {
				return true
			}
		}
		return false
	}, nil
}
