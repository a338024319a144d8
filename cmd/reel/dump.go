package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/ops"
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
}

// register defines the options' flags on fs.
func (o *dumpOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.format, "format", "text", "output format: "+strings.Join(dumpFormatNames(), ", "))
	fs.StringVar(&o.example, "example", "attention", "built-in example graph: "+strings.Join(exampleNames(), ", "))
}

func runDump(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o dumpOptions
	fs := newFlags("dump", "[--format text|dot|json] [--example NAME]", `
Dump prints a graph: its inputs, weights and states, then one node per line
with its op, outputs, inputs, state writes, attributes and scope (text); a
Graphviz graph (dot: pipe it into 'dot -Tsvg'); or JSON for scripts.

For now the graphs are built-in examples of a tiny nGPT-style model (hidden
64, 4 query and 2 KV heads of 16):
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
	return write(w, g)
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
