package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// usageError is a command line a subcommand cannot run: reel prints it (unless
// the flag package already has) and exits with status 2.
type usageError struct {
	err     error
	printed bool // the flag package already printed the error and the usage
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef makes a usageError, for flag values or arguments a command rejects.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// newFlags makes the flag set of subcommand name. Its -h help prints
// "usage: reel <name> <synopsis>", the description, then the flags; it also
// takes -v, which turns on debug logging as reel's own -v does.
func newFlags(name, synopsis, description string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("reel "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Bool("v", false, "log debug messages")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: reel %s %s\n\n%s\n\nflags:\n", name, synopsis, strings.TrimSpace(description))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses a subcommand's arguments. It returns flag.ErrHelp for -h
// (the help is printed), a usageError for a bad flag or for positional
// arguments (none of the commands take any), and applies -v to the logger
// in ctx.
func parseFlags(ctx context.Context, fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err: err, printed: true}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if f := fs.Lookup("v"); f != nil && f.Value.String() == "true" {
		if ls, ok := ctx.Value(logKey{}).(logState); ok {
			ls.level.Set(slog.LevelDebug)
		}
	}
	return nil
}

// logKey is the context key of the logger reel hands its commands.
type logKey struct{}

type logState struct {
	log   *slog.Logger
	level *slog.LevelVar
}

// withLogger returns ctx carrying log, whose level -v may lower to debug.
func withLogger(ctx context.Context, log *slog.Logger, level *slog.LevelVar) context.Context {
	return context.WithValue(ctx, logKey{}, logState{log, level})
}

// logger is the logger in ctx; without one (a test calling a run function
// directly) messages go nowhere.
func logger(ctx context.Context) *slog.Logger {
	if ls, ok := ctx.Value(logKey{}).(logState); ok {
		return ls.log
	}
	return slog.New(slog.DiscardHandler)
}
