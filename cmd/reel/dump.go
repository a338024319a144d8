package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/models/dory"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
)

// dumpOptions are the flags of reel dump.
//
// Where to plug in:
//   - a model source (--model DIR --stage --loops --want --rows): add the
//     fields here, register them in register, and resolve them in dumpGraph,
//     before the example fallback;
//   - planner passes (--pass graph|fused|plan, --stats): add the fields here,
//     register them, and apply them in writeDump, between the graph and the
//     writer.
type dumpOptions struct {
	format  string // text, dot or json
	example string // a built-in example graph (see examples)

	model     string // a Dory checkpoint folder
	synthetic string // a known Dory shape, built as graphs only
	stage     string
	loops     int
	want      string
	rows      int

	pass  string // graph, fused or plan
	stats bool
}

// register defines the options' flags on fs.
func (o *dumpOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.format, "format", "text", "output format: "+strings.Join(dumpFormatNames(), ", "))
	fs.StringVar(&o.example, "example", "attention", "built-in example graph: "+strings.Join(exampleNames(), ", "))
	fs.StringVar(&o.model, "model", "", "dump a stage of the Dory checkpoint in this folder")
	fs.StringVar(&o.synthetic, "synthetic", "", "dump a stage of a known shape without weights: dory-4b, dory-h512 or "+qwen4Synthetic)
	fs.StringVar(&o.stage, "stage", "all", "stage: all, first, firstread, read, secondread, secondfresh")
	fs.IntVar(&o.loops, "loops", 0, "recurrent loops (0: the model's)")
	fs.StringVar(&o.want, "want", "last", "logits the stage computes: none, last or all")
	fs.IntVar(&o.rows, "rows", 1, "rows the stage runs (1: decode; more: a prompt chunk)")
	fs.StringVar(&o.pass, "pass", planner.PassGraph, "what to print: "+strings.Join(planner.DumpPasses(), ", ")+" (the graph as built, after fusion, or the plan with launches and arena offsets)")
	fs.BoolVar(&o.stats, "stats", false, "print nodes, launches, arena bytes, temporaries' bytes and fusions by rule instead")
}

func runDump(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o dumpOptions
	fs := newFlags("dump", "[--model DIR | --synthetic dory-4b|qwen4-12l] [--stage S --loops L --want W --rows N] [--pass graph|fused|plan] [--stats] [--format text|dot|json]", `
Dump prints a graph: its inputs, weights and states, then one node per line
with its op, outputs, inputs, state writes, attributes and scope (text); a
Graphviz graph (dot: pipe it into 'dot -Tsvg'); or JSON for scripts.

With --model (a Dory or Qwen4-Exp checkpoint) or --synthetic (a known shape,
no weights needed) it prints one stage graph, keyed by --stage, --loops,
--want and --rows. A Qwen4-Exp has the stages forward, draft (the MTP
head) and settle (a speculation window's recurrences over --rows rows of
its tape). --pass fused prints it after the planner's fusion; --pass plan
prints the plan: each launch, its fused members, its buffers and arena
offsets. --stats prints the planner's report instead. REEL_FUSE=0 turns
fusion off.

Without a model it prints a built-in example of a tiny nGPT-style model
(hidden 64, 4 query and 2 KV heads of 16):
`+exampleHelp(), stderr)
	o.register(fs)
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	write, ok := dumpFormat(o.format)
	if !ok {
		return usagef("unknown --format %q (want %s)", o.format, strings.Join(dumpFormatNames(), ", "))
	}
	g, err := dumpGraph(ctx, &o)
	if err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	if err := g.Validate(ops.LookupOp); err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	logger(ctx).Debug("dumping graph", "graph", g.Name, "nodes", len(g.Nodes), "values", len(g.Values), "format", o.format)
	return writeDump(stdout, g, &o, write)
}

// dumpGraph resolves the graph the flags ask for. Model sources go here,
// ahead of the examples.
func dumpGraph(ctx context.Context, o *dumpOptions) (*graph.Graph, error) {
	if (o.model != "" && o.synthetic == "" && isQwen4(o.model)) || (o.model == "" && o.synthetic == qwen4Synthetic) {
		return qwen4Stage(o)
	}
	if o.model != "" || o.synthetic != "" {
		return doryStage(o)
	}
	ex, ok := findExample(o.example)
	if !ok {
		return nil, usagef("unknown --example %q (want %s)", o.example, strings.Join(exampleNames(), ", "))
	}
	logger(ctx).Debug("building example", "name", ex.name)
	return ex.build()
}

// writeDump writes g as the flags ask. Planner passes and statistics go here:
// transform g (or write a plan dump instead) before the writer runs.
func writeDump(w io.Writer, g *graph.Graph, o *dumpOptions, write func(io.Writer, *graph.Graph) error) error {
	opts := planner.DefaultOptions()
	if o.stats {
		_, rep, err := planner.Plan(g, opts)
		if err != nil {
			return err
		}
		return planner.WriteStats(w, rep)
	}
	if o.pass == planner.PassGraph {
		return write(w, g)
	}
	if !slices.Contains(planner.DumpPasses(), o.pass) {
		return usagef("unknown --pass %q (want %s)", o.pass, strings.Join(planner.DumpPasses(), ", "))
	}
	return planner.Dump(w, g, o.pass, o.format, opts)
}

// doryStage builds the stage graph the model flags ask for.
func doryStage(o *dumpOptions) (*graph.Graph, error) {
	var cfg dory.Config
	var dtypes func(string) graph.DType
	switch {
	case o.model != "" && o.synthetic != "":
		return nil, usagef("give --model or --synthetic, not both")
	case o.synthetic != "":
		shape, ok := syntheticShapes()[o.synthetic]
		if !ok {
			return nil, usagef("unknown --synthetic %q (want dory-4b or dory-h512)", o.synthetic)
		}
		cfg = shape()
	default:
		m, err := dory.Load(o.model)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		cfg, dtypes = m.Config, m.MatrixDType
	}
	stage, err := dory.ParseStage(o.stage)
	if err != nil {
		return nil, usagef("--stage: %v", err)
	}
	want, err := dory.ParseWant(o.want)
	if err != nil {
		return nil, usagef("--want: %v", err)
	}
	loops := o.loops
	if loops == 0 {
		loops = cfg.Loops
	}
	return dory.BuildStage(&cfg, dory.Key{Stage: stage, Loops: loops, Want: want, Rows: o.rows}, dtypes)
}

// dumpFormats are the output formats of reel dump, by flag value.
func dumpFormats() []struct {
	name  string
	write func(io.Writer, *graph.Graph) error
} {
	return []struct {
		name  string
		write func(io.Writer, *graph.Graph) error
	}{
		{"text", graph.WriteText},
		{"dot", graph.WriteDOT},
		{"json", graph.WriteJSON},
	}
}

func dumpFormat(name string) (func(io.Writer, *graph.Graph) error, bool) {
	for _, f := range dumpFormats() {
		if f.name == name {
			return f.write, true
		}
	}
	return nil, false
}

func dumpFormatNames() []string {
	var out []string
	for _, f := range dumpFormats() {
		out = append(out, f.name)
	}
	return out
}
