package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/planner"
)

// dumpOptions are the flags of reel dump.
//
// Where to plug in:
//   - a model source (--model DIR --stage --want --rows): add the
//     fields here, register them in register, and resolve them in dumpGraph,
//     before the example fallback;
//   - planner passes (--pass graph|fused|plan, --stats): add the fields here,
//     register them, and apply them in writeDump, between the graph and the
//     writer.
type dumpOptions struct {
	format  string // text, dot or json
	example string // a built-in example graph (see examples)

	model     string // a checkpoint folder
	synthetic string // a known shape, built as graphs only
	stage     string
	want      string
	rows      int
	quant     string             // --quant: the format to quantize the model's projections in
	params    map[string]*string // the architectures' own options

	pass  string // graph, fused or plan
	stats bool
}

// register defines the options' flags on fs.
func (o *dumpOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.format, "format", "text", "output format: "+strings.Join(dumpFormatNames(), ", "))
	fs.StringVar(&o.example, "example", "attention", "built-in example graph: "+strings.Join(exampleNames(), ", "))
	fs.StringVar(&o.model, "model", "", "dump a stage of the checkpoint in this folder")
	fs.StringVar(&o.synthetic, "synthetic", "", "dump a stage of a known shape without weights: "+strings.Join(models.SyntheticNames(), ", "))
	fs.StringVar(&o.stage, "stage", "", "the model's stage (default: forward, any model's plain forward chunk): "+allStages())
	fs.StringVar(&o.want, "want", "last", "logits the stage computes: none, last or all")
	fs.IntVar(&o.rows, "rows", 1, "rows the stage runs (1: decode; more: a prompt chunk)")
	registerQuant(fs, &o.quant)
	fs.StringVar(&o.pass, "pass", planner.PassGraph, "what to print: "+strings.Join(planner.DumpPasses(), ", ")+" (the graph as built, after fusion, or the plan with launches and arena offsets)")
	fs.BoolVar(&o.stats, "stats", false, "print nodes, launches, arena bytes, temporaries' bytes and fusions by rule instead")
	registerParams(fs, &o.params)
}

// allStages lists each architecture's stages for the help (forward alone
// for one with no shape to ask).
func allStages() string {
	var out []string
	for _, a := range models.All() {
		stages := "forward"
		if mk := firstShape(a); mk != nil {
			if m, err := mk(); err == nil {
				stages = stageNames(m)
			}
		}
		out = append(out, a.Name+": "+stages)
	}
	return strings.Join(out, "; ")
}

// firstShape is an architecture's first synthetic shape (by name), to ask
// a model of it its stages.
func firstShape(a models.Arch) func() (models.Model, error) {
	names := slices.Sorted(maps.Keys(a.Shapes))
	if len(names) == 0 {
		return nil
	}
	return a.Shapes[names[0]]
}

func runDump(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o dumpOptions
	fs := newFlags("dump", "[--model DIR | --synthetic NAME] [--stage S --want W --rows N] [--pass graph|fused|plan] [--stats] [--format text|dot|json]", `
Dump prints a graph: its inputs, weights and states, then one node per line
with its op, outputs, inputs, state writes, attributes and scope (text); a
Graphviz graph (dot: pipe it into 'dot -Tsvg'); or JSON for scripts.

With --model (a checkpoint of any registered architecture) or --synthetic
(a known shape, no weights needed) it prints one graph of the model, keyed
by --stage, --want and --rows (and an architecture's own flags, such as
Dory's --loops). Every model has the stage forward, the default (Dory
calls it all); Dory's gate adds first, firstread, read, secondread and
secondfresh; Qwen4-Exp has draft (the MTP head) and settle (a speculation
window's recurrences over --rows rows of its tape). --pass fused prints
the graph after the planner's fusion; --pass plan prints the plan: each
launch, its fused members, its buffers and arena offsets. --stats prints
the planner's report instead. REEL_FUSE=0 turns fusion off.

A whole model's graph in DOT lays out in about a second with 'dot -Tsvg';
for a large model (thousands of nodes) render --pass fused or --pass plan.

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
	if o.model != "" || o.synthetic != "" {
		return modelGraph(o)
	}
	if o.stage != "" {
		return nil, usagef("--stage %q needs --model or --synthetic", o.stage)
	}
	if o.quant != "" {
		return nil, usagef("--quant %s needs --model or --synthetic", o.quant)
	}
	ex, ok := findExample(o.example)
	if !ok {
		return nil, usagef("unknown --example %q (want %s)", o.example, strings.Join(exampleNames(), ", "))
	}
	logger(ctx).Debug("building example", "name", ex.name)
	return ex.build()
}

// modelGraph builds the graph of a model the dump flags ask for.
func modelGraph(o *dumpOptions) (*graph.Graph, error) {
	var m models.Model
	err := checkQuant(o.quant)
	switch {
	case err != nil:
		return nil, err
	case o.model != "" && o.synthetic != "":
		return nil, usagef("give --model or --synthetic, not both")
	case o.synthetic != "":
		a, ok := models.Synthetic(o.synthetic)
		if !ok || a.Shapes[o.synthetic] == nil {
			return nil, usagef("unknown --synthetic %q (want %s)", o.synthetic, strings.Join(models.SyntheticNames(), ", "))
		}
		if m, err = a.Shapes[o.synthetic](); err == nil && o.quant != "" {
			if m, err = models.Quantize(m, o.quant, nil); errors.Is(err, models.ErrNotQuantized) {
				return nil, usagef("%v", err)
			}
		}
	default:
		m, err = loadModel(o.model, o.quant)
	}
	if err != nil {
		return nil, err
	}
	defer m.Close()
	want, err := lm.ParseWant(o.want)
	if err != nil {
		return nil, usagef("--want: %v", err)
	}
	if o.rows < 1 {
		return nil, usagef("--rows %d: want at least 1", o.rows)
	}
	stage := o.stage
	if stage == "" || stage == "forward" {
		stage = m.Stages()[0] // the plain forward, whatever the model calls it
	}
	if !slices.Contains(m.Stages(), stage) {
		return nil, usagef("--stage %q: a %s model has the stages %s", stage, m.Arch(), stageNames(m))
	}
	opts := models.Options{Params: map[string]string{}}
	for n, v := range o.params {
		if *v != "" {
			opts.Params[n] = *v
		}
	}
	return m.Graph(stage, o.rows, want, opts)
}

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

// dumpFormats are the writers of --format, by name.
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
