package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/planner"
	"github.com/reel-runtime/reel/trace"
)

// errDiverged is the error of a diff past the tolerance, errNonFinite that
// of --first-nonfinite when it finds a value.
var (
	errDiverged  = errors.New("trace: the recordings diverge")
	errNonFinite = errors.New("trace: a value is not finite")
)

const traceDoc = `
Trace runs token ids through a model with every plan instrumented and
writes the output of each node whose name matches --match (a glob: * any
text, ? one character) into a safetensors file: one tensor per value per
call, named "NAME#CALL", with the op, scope, call, positions and dtype in
its metadata. Names are scope and label, as dumps print them:
"layer 2 / attn / attn_out", "input block / layer 0 attn / out",
"head / logits"; a value nobody labelled is "SCOPE / tN". With fusion on,
the values are those of the fused launches (named after the value they
stand for); --fused=false traces every op. The traced values stay in the
plan's arena until each run ends and are read then, so the run's numbers
are those of an untraced one.

--first-nonfinite stops at the first value holding a NaN or an infinity
and prints its name, op and the ranges of its node's inputs (exit 1).

--diff A B compares two traces: by name and call, or by position when one
was run in other chunks (Reel against tools/trace_hf.py's transformers
trace), in A's order. The first line is "first divergence: NAME (op OP,
max abs X, nmse Y)" or "no divergence past TOL", then a line per compared
value; exit 1 past the tolerance.`

func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var mf modelFlags
	fs := newFlags("trace", "[--model DIR] --ids 1,2,3 [--match GLOB] [--fused=false] [--first-nonfinite] --out FILE.safetensors\n       reel trace --diff A.safetensors B.safetensors [--tol T] [--metric abs|nmse]", traceDoc, stderr)
	mf.register(fs, true)
	idsFlag := fs.String("ids", "", "comma-separated token ids (required)")
	wantFlag := fs.String("want", "all", "rows whose logits the forward reads: last or all")
	match := fs.String("match", "*", "trace the values whose names match this glob (several: separated by commas)")
	fused := fs.Bool("fused", planner.DefaultOptions().Fuse, "plan with fusion (false: trace every op)")
	out := fs.String("out", "", "safetensors file to write the trace to")
	firstNonFinite := fs.Bool("first-nonfinite", false, "stop at the first value holding a NaN or an infinity and describe it")
	maxBytes := fs.Int64("max-bytes", trace.DefaultMaxBytes, "most bytes of values to keep")
	diff := fs.Bool("diff", false, "compare two trace files given as arguments")
	tol := fs.Float64("tol", 1e-4, "diff: the tolerance of the metric")
	metricFlag := fs.String("metric", "abs", "diff: abs (max absolute error) or nmse")
	files, err := parseTraceFlags(ctx, fs, args)
	if err != nil {
		return err
	}
	if *diff {
		if len(files) != 2 {
			return usagef("--diff takes two trace files, not %d", len(files))
		}
		m, err := trace.ParseMetric(*metricFlag)
		if err != nil {
			return usagef("--metric: %v", err)
		}
		if !(*tol >= 0) {
			return usagef("--tol %g: want a tolerance of 0 or more", *tol)
		}
		return diffTraces(stdout, files[0], files[1], *tol, m)
	}
	if len(files) > 0 {
		return usagef("unexpected argument %q (only --diff takes files)", files[0])
	}
	ids, want, err := parseIDsWant(*idsFlag, *wantFlag)
	if err != nil {
		return err
	}
	if *out == "" && !*firstNonFinite {
		return usagef("--out is required (or --first-nonfinite)")
	}
	if *maxBytes < 1 {
		return usagef("--max-bytes %d: want at least 1", *maxBytes)
	}
	var patterns []string
	for _, p := range strings.Split(*match, ",") {
		if p = strings.TrimSpace(p); p != "" {
			patterns = append(patterns, p)
		}
	}
	matchFn, err := trace.Glob(patterns...)
	if err != nil {
		return usagef("--match: %v", err)
	}
	rec := &trace.Recorder{Match: matchFn, MaxBytes: *maxBytes, FirstNonFinite: *firstNonFinite}
	po := planner.DefaultOptions()
	po.Fuse = *fused
	l, err := mf.openTraced(ctx, rec.Planner(po))
	if err != nil {
		return err
	}
	defer l.Close()
	if err := checkIDs(ids, l.model.Vocab()); err != nil {
		return usagef("--ids: %v", err)
	}
	_, runErr := l.session.Forward(ids, 0, want)
	found := rec.NonFinite()
	if runErr != nil && found == nil {
		return runErr
	}
	if *out != "" {
		if err := trace.Write(*out, rec.Records()); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "traced %d values of %d calls (%s, %s) into %s\n", len(rec.Records()), rec.Calls(), l.model.Arch(), l.be.Name(), *out)
	}
	if *firstNonFinite {
		if found != nil {
			fmt.Fprint(stdout, found.String())
			return errNonFinite
		}
		fmt.Fprintf(stdout, "no non-finite value in %d values of %d calls\n", len(rec.Records()), rec.Calls())
	}
	return nil
}

// parseTraceFlags parses flags and file arguments in any order (--diff A
// B --tol 1e-3), then applies -v as parseFlags does; it returns the files.
func parseTraceFlags(ctx context.Context, fs *flag.FlagSet, args []string) ([]string, error) {
	var files []string
	stdout := fs.Output()
	if ls, ok := ctx.Value(logKey{}).(logState); ok {
		stdout = ls.stdout // the help a user asks for goes to stdout
	}
	for {
		if err := parseHelp(fs, args, stdout, fs.Output()); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err: err, printed: true}
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return files, parseFlags(ctx, fs, nil)
}

// openTraced loads the model the flags name and starts a session whose
// plans are planned with po (an instrumented plan).
func (f *modelFlags) openTraced(ctx context.Context, po *planner.Options) (*loaded, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	dir, err := f.modelDir(true)
	if err != nil {
		return nil, err
	}
	m, err := loadModel(dir, f.quant)
	if err != nil {
		return nil, err
	}
	return f.start(ctx, dir, tracedModel{m, po, !f.buckets.set})
}

// tracedModel is a model whose sessions plan with its planner options
// and, unless --buckets was given, run every chunk on a plan of its own
// rows (lm.BucketsOff), so that each traced value holds the call's rows
// and no padding.
type tracedModel struct {
	models.Model
	po    *planner.Options
	exact bool
}

// NewSession starts a session of the model with the planner options set.
func (m tracedModel) NewSession(o models.Options) (models.Session, error) {
	o.Planner = m.po
	if m.exact {
		o.Buckets = lm.BucketsOff
	}
	return m.Model.NewSession(o)
}

// diffTraces compares two trace files and prints the report.
func diffTraces(w io.Writer, a, b string, tol float64, m trace.Metric) error {
	ra, err := trace.Read(a)
	if err != nil {
		return err
	}
	rb, err := trace.Read(b)
	if err != nil {
		return err
	}
	rep := trace.Diff(ra, rb, tol, m)
	if _, err := rep.WriteTo(w); err != nil {
		return err
	}
	if rep.Diverged() {
		c := rep.Compared[rep.First]
		return fmt.Errorf("%w: first at %s (call %d)", errDiverged, c.Name, c.Call)
	}
	return nil
}
