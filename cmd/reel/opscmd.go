package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
	"github.com/reel-runtime/reel/ops/cuda"
)

func runOps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ops", "[--op NAME]", `
Ops lists every op Reel knows: its name, its inputs, whether it is a fused op
(with a decomposition into primitive ops), whether the CPU and CUDA backends
have a kernel for it, and the start of its math. With --op it prints that
op's whole statement of its math.`, stderr)
	name := fs.String("op", "", "print one op's math")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	be := cpu.New(1)
	if *name != "" {
		d, ok := ops.Lookup(*name)
		if !ok {
			return usagef("unknown op %q (reel ops lists them)", *name)
		}
		_, err := fmt.Fprintf(stdout, "%s\n\n%s\n", d.Op, d.Doc)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "op\tinputs\tfused\tcpu\tcuda\tmath")
	for _, d := range ops.All() {
		arity := fmt.Sprint(d.Arity)
		if d.Arity < 0 {
			arity = "n"
		}
		fused := ""
		if d.Fused() {
			fused = "yes"
		}
		_, onCPU := be.Kernel(d.Op)
		doc := d.Doc
		if i := strings.Index(doc, ". "); i > 0 && i < 90 {
			doc = doc[:i+1]
		} else if len(doc) > 90 {
			doc = doc[:87] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Op, arity, fused, yesNo(onCPU), yesNo(cuda.HasKernel(d.Op)), doc)
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
