// Command reel runs, inspects and debugs Reel models from the command line.
//
// Usage:
//
//	reel [-v] <command> [flags]
//
// Each command has its own flags; `reel <command> -h` lists them on
// stdout (as does `reel help <command>`). Errors are printed on stderr as
// "reel: ..." and exit with status 1; a bad command line exits with status 2
// after printing the usage on stderr. An interrupt (Ctrl-C) stops the
// command at its next check and exits with status 130; a second one kills
// reel at once.
//
// Adding a command: write its run function in a file of its own (see info.go
// and dump.go: a newFlags set, parseFlags, then the work), and add one line
// for it to the table in commands below.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"text/tabwriter"
)

// command is one subcommand of reel.
type command struct {
	// name is the word after reel on the command line.
	name string
	// summary is the one line the usage lists for it.
	summary string
	// run does the work. It parses args (the words after the name) with
	// newFlags/parseFlags, writes results to stdout and anything for the
	// person at the terminal to stderr, and returns an error with context;
	// it never calls os.Exit. The context is cancelled on an interrupt and
	// carries the logger (see logger).
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the table of subcommands, in the order the usage lists them.
// A new subcommand is a file with its run function and one line here.
func commands() []command {
	return []command{
		{"info", "summarize a checkpoint folder: config, parameters, tensors", runInfo},
		{"dump", "print a graph as text, Graphviz DOT or JSON", runDump},
		{"run", "generate text from a prompt (default: the embedded dory-gotiny)", runRun},
		{"chat", "chat with a model in the terminal through its chat template", runChat},
		{"logits", "print a model's logits for token ids as JSON", runLogits},
		{"check", "compare a model's logits with a golden.json", runCheck},
		{"trace", "record every node's values to a file, compare two recordings, find the first NaN", runTrace},
		{"bench", "measure prefill and decode tokens/s", runBench},
		{"ops", "list the ops, their math and which backends have kernels", runOps},
		{"template", "render a conversation with a tokenizer's chat template", runTemplate},
		{"tokenize", "encode stdin's text to token ids with a tokenizer.json, or decode ids", runTokenize},
		{"perplexity", "measure a model's perplexity over a text, quantized at load or not", runPerplexity},
		{"quantize", "write a checkpoint with its projections quantized (fp8, q8, q4)", runQuantize},
	}
}

func main() {
	ctx, stop := interruptContext()
	code := reelMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// interruptContext is cancelled by the first interrupt (Ctrl-C), once the
// default handling is back: a second interrupt kills reel at once,
// whatever it is waiting on.
func interruptContext() (context.Context, context.CancelFunc) {
	first, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-first.Done()
		stop()
		cancel()
	}()
	return ctx, func() { stop(); cancel() }
}

// Exit statuses.
const (
	exitOK          = 0
	exitError       = 1   // the command failed
	exitUsage       = 2   // the command line is wrong
	exitInterrupted = 130 // stopped by an interrupt (128 + SIGINT, as shells report it)
)

// reelMain runs reel with the arguments after the program name and returns
// the exit status.
func reelMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reel", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "log debug messages (also accepted after the command)")
	fs.Usage = func() { usage(fs.Output()) }
	if err := parseHelp(fs, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	level := new(slog.LevelVar)
	if *verbose {
		level.Set(slog.LevelDebug)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: dropTime}))
	ctx = withLogger(ctx, log, level, stdout)

	rest := fs.Args()
	if len(rest) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, args := rest[0], rest[1:]
	if name == "help" {
		if len(args) == 0 {
			usage(stdout)
			return exitOK
		}
		name, args = args[0], []string{"-h"}
	}
	cmd, ok := findCommand(name)
	if !ok {
		fmt.Fprintf(stderr, "reel: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
	log.Debug("command", "name", name, "args", args)
	err := cmd.run(ctx, args, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "reel %s: interrupted\n", name)
		return exitInterrupted
	case errors.As(err, &ue):
		if !ue.printed {
			fmt.Fprintf(stderr, "reel %s: %v\nRun 'reel %s -h' for usage.\n", name, ue.err, name)
		}
		return exitUsage
	default:
		fmt.Fprintf(stderr, "reel: %v\n", err)
		return exitError
	}
}

// dropTime leaves the time out of log lines: on a terminal it is noise.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

// findCommand looks a subcommand up by name.
func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usage writes reel's usage: the synopsis and the commands.
func usage(w io.Writer) {
	fmt.Fprint(w, `usage: reel [-v] <command> [flags]

Reel runs large-language-model inference as static dataflow graphs of ops,
planned once and replayed on a CPU or CUDA backend.

commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
flags:
  -v    log debug messages

Run 'reel <command> -h' for a command's flags, 'reel help' for this text.
`)
}
