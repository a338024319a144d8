// Package planner turns a graph into a plan a backend runs. Its passes, in
// order, each a small type with its own report line:
//
//  1. Validate: the graph is well formed and every op is known;
//  2. Fuse: pattern rules put fused ops in place of the primitive chains
//     they decompose into (sibling matmuls, SwiGLU in the gate/up epilogue,
//     rotary + norm + scale + KV write, slerp, the loop mix, the attention
//     output gate, generic elementwise chains);
//  3. Schedule: a topological order that honours state accesses;
//  4. Memory: liveness of every temporary over the schedule and best-fit
//     offsets in one arena (256-byte alignment, in place where an
//     elementwise op's input dies), deterministic for a given graph.
//
// Lower then binds the plan on one backend: one arena, one view per
// temporary, one step per scheduled node. Every backend runs plans, never the
// raw graph, so what is tested is what runs.
package planner

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/reel-runtime/reel/graph"
)

// Align is the byte alignment of every temporary in the arena.
const Align = 256

// Options choose what the planner does.
type Options struct {
	// Fuse turns the fusion rules on.
	Fuse bool
	// Skip names fusion rules to leave out (for bisecting a bad fusion).
	Skip []string
	// Trace, when set, instruments the plan for debugging (see Trace).
	Trace *Trace
}

// DefaultOptions fuses unless the environment says REEL_FUSE=0;
// REEL_FUSE_SKIP=rule,rule leaves out single rules.
func DefaultOptions() Options {
	o := Options{Fuse: os.Getenv("REEL_FUSE") != "0"}
	if s := os.Getenv("REEL_FUSE_SKIP"); s != "" {
		for _, r := range strings.Split(s, ",") {
			if r = strings.TrimSpace(r); r != "" {
				o.Skip = append(o.Skip, r)
			}
		}
	}
	return o
}

// Fusion is one fused node of a planned graph and what it stands for.
type Fusion struct {
	// Rule is the name of the rule that made the node.
	Rule string
	// Members are the nodes of the source graph the fused node replaces, in
	// build order.
	Members []*graph.Node
}

// Alloc is where a temporary lives in the arena.
type Alloc struct {
	// Offset is the byte offset of the value in the arena (a multiple of Align).
	Offset int
	// Bytes is the value's size.
	Bytes int
	// Def is the schedule step that produces the value; Last the last step
	// that reads it (the schedule's length for a graph output, Def for a
	// value nobody reads).
	Def, Last int
	// Alias, when set, is the input of the producing node whose memory the
	// value reuses in place (same Offset).
	Alias *graph.Value
}

// Planned is a graph after every pass: what Lower binds on a backend and
// what the dumps print.
type Planned struct {
	// Source is the graph given to Plan, unchanged.
	Source *graph.Graph
	// Graph is the graph after fusion (Source itself when nothing fused).
	Graph *graph.Graph
	// Schedule is the order the nodes of Graph run in: one launch each.
	Schedule []*graph.Node
	// Offsets is the arena placement of each Temp of Graph, by value ID;
	// the entries of other kinds are unused (Bytes -1).
	Offsets []Alloc
	// ArenaBytes is the size of the arena.
	ArenaBytes int
	// TempBytes is the sum of every temporary's size, each rounded up to
	// Align: what separate allocations would take.
	TempBytes int
	// Fusions gives, for each fused node of Graph, its rule and members.
	Fusions map[*graph.Node]*Fusion
	// Traced are the values an instrumented plan keeps (Options.Trace), in
	// schedule order.
	Traced []TracePoint

	// origin maps each node of Graph to the source nodes it stands for.
	origin map[*graph.Node][]*graph.Node
	// leafOf maps an input, weight or state of Source to the one of Graph.
	leafOf map[*graph.Value]*graph.Value
	// srcOf maps each temporary of Graph to the one of Source it stands for.
	srcOf map[*graph.Value]*graph.Value
	opts  Options
}

// Origin lists the nodes of the source graph that a node of Graph stands for
// (itself for a node that fusion kept).
func (p *Planned) Origin(n *graph.Node) []*graph.Node { return p.origin[n] }

// SourceValue gives the temporary of Source that a temporary of Graph
// stands for: itself when nothing fused, the member's output a fused node's
// output replaces otherwise; nil for a value that is not a temporary of
// Graph.
func (p *Planned) SourceValue(v *graph.Value) *graph.Value { return p.srcOf[v] }

// Leaf gives the input, weight or state of Graph that v stands for: v itself
// when it is one of Graph's, the value of the same name when v belongs to
// Source; nil otherwise.
func (p *Planned) Leaf(v *graph.Value) *graph.Value {
	if v == nil || v.Kind == graph.Temp {
		return nil
	}
	if v.ID >= 0 && v.ID < len(p.Graph.Values) && p.Graph.Values[v.ID] == v {
		return v
	}
	return p.leafOf[v]
}

// Alloc gives a temporary's placement.
func (p *Planned) Alloc(v *graph.Value) (Alloc, bool) {
	if v == nil || v.Kind != graph.Temp || v.ID < 0 || v.ID >= len(p.Offsets) || p.Graph.Values[v.ID] != v {
		return Alloc{}, false
	}
	return p.Offsets[v.ID], true
}

// PassReport is one pass's line in the report.
type PassReport struct {
	Pass    string
	Summary string
	Elapsed time.Duration
}

// Report says what the passes did.
type Report struct {
	// Graph is the planned graph's name.
	Graph  string
	Passes []PassReport
	// Nodes is the source graph's node count; Launches the planned graph's.
	Nodes, Launches int
	// Temps is the number of temporaries after fusion; InPlace how many
	// reuse an input's memory.
	Temps, InPlace int
	// ArenaBytes and TempBytes are as in Planned.
	ArenaBytes, TempBytes int
	// Fusions counts the fused nodes each rule made; Absorbed the source
	// nodes they replace.
	Fusions, Absorbed map[string]int
}

// String gives the report as `reel dump --stats` prints it: a line per pass,
// then the totals. Timings are left out so the text is stable.
func (r Report) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "plan %s\n", r.Graph)
	for _, p := range r.Passes {
		fmt.Fprintf(&sb, "  %-9s %s\n", p.Pass, p.Summary)
	}
	fmt.Fprintf(&sb, "  nodes %d, launches %d, arena %d bytes, temporaries %d bytes (%d values, %d in place)\n",
		r.Nodes, r.Launches, r.ArenaBytes, r.TempBytes, r.Temps, r.InPlace)
	if len(r.Fusions) > 0 {
		fmt.Fprintf(&sb, "  fusions: %s\n", r.FusionString())
	}
	return sb.String()
}

// FusionString lists the fusions by rule: "slerp 12 (72 nodes), mix 2 (4 nodes)".
func (r Report) FusionString() string {
	names := make([]string, 0, len(r.Fusions))
	for n := range r.Fusions {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d (%d nodes)", n, r.Fusions[n], r.Absorbed[n])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Pass is one step of planning; it reads and updates the Planned and
// returns its report line.
type Pass interface {
	Name() string
	Run(p *Planned) (summary string, err error)
}

// Passes gives the passes Plan runs for the options, in order: validate,
// fuse, schedule, trace (with opts.Trace), memory.
func Passes(opts Options) []Pass {
	fuse := Fuse{Off: true}
	if opts.Fuse {
		fuse = Fuse{Rules: Rules(opts.Skip)}
	}
	passes := []Pass{Validate{}, fuse, Schedule{}}
	if opts.Trace != nil {
		passes = append(passes, TracePass{Match: opts.Trace.Match})
	}
	return append(passes, Memory{Align: Align})
}

// Plan validates, fuses (with opts.Fuse), schedules, instruments (with
// opts.Trace) and lays out g. The graph given is not changed; fusion builds
// a new one.
func Plan(g *graph.Graph, opts Options) (*Planned, Report, error) {
	if g == nil {
		return nil, Report{}, fmt.Errorf("planner: nil graph")
	}
	p := newPlanned(g, opts)
	rep := Report{Graph: g.Name, Nodes: len(g.Nodes), Fusions: map[string]int{}, Absorbed: map[string]int{}}
	for _, pass := range Passes(opts) {
		t := time.Now()
		s, err := pass.Run(p)
		if err != nil {
			return nil, rep, fmt.Errorf("planner %s: %s: %w", g.Name, pass.Name(), err)
		}
		rep.Passes = append(rep.Passes, PassReport{Pass: pass.Name(), Summary: s, Elapsed: time.Since(t)})
	}
	rep.Launches = len(p.Schedule)
	rep.ArenaBytes, rep.TempBytes = p.ArenaBytes, p.TempBytes
	for _, v := range p.Graph.Values {
		if v.Kind == graph.Temp {
			rep.Temps++
			if p.Offsets[v.ID].Alias != nil {
				rep.InPlace++
			}
		}
	}
	for _, f := range p.Fusions {
		rep.Fusions[f.Rule]++
		rep.Absorbed[f.Rule] += len(f.Members)
	}
	return p, rep, nil
}

// newPlanned starts a Planned whose graph is g itself.
func newPlanned(g *graph.Graph, opts Options) *Planned {
	p := &Planned{Source: g, Graph: g, Fusions: map[*graph.Node]*Fusion{}, origin: map[*graph.Node][]*graph.Node{},
		leafOf: map[*graph.Value]*graph.Value{}, srcOf: map[*graph.Value]*graph.Value{}, opts: opts}
	for _, n := range g.Nodes {
		p.origin[n] = []*graph.Node{n}
	}
	for _, v := range g.Values {
		if v.Kind != graph.Temp {
			p.leafOf[v] = v
		} else {
			p.srcOf[v] = v
		}
	}
	return p
}
