package main

import (
	"bytes"
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
// "usage: reel <name> <synopsis>", the description, then the flags (on
// stdout: see parseFlags); it also takes -v, which turns on debug logging
// as reel's own -v does.
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
// (the help is printed on reel's stdout), a usageError for a bad flag (the
// error and the usage are printed on the flag set's output, stderr) or for
// positional arguments (none of the commands take any), and applies -v to
// the logger in ctx.
func parseFlags(ctx context.Context, fs *flag.FlagSet, args []string) error {
	stdout := fs.Output()
	if ls, ok := ctx.Value(logKey{}).(logState); ok {
		stdout = ls.stdout
	}
	if err := parseHelp(fs, args, stdout, fs.Output()); err != nil {
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

// parseHelp parses args with fs, writing what the flag package prints to
// stdout when it is the help a user asked for (-h, -help: a help piped
// into grep or less must work) and to stderr when it is an error.
func parseHelp(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var msg bytes.Buffer
	fs.SetOutput(&msg)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	w := stderr
	if errors.Is(err, flag.ErrHelp) {
		w = stdout
	}
	if _, werr := msg.WriteTo(w); err == nil && werr != nil {
		err = werr
	}
	return err
}

// logKey is the context key of the logger reel hands its commands.
type logKey struct{}

type logState struct {
	log   *slog.Logger
	level *slog.LevelVar
	// stdout is reel's standard output, where help goes.
	stdout io.Writer
}

// withLogger returns ctx carrying log, whose level -v may lower to debug,
// and reel's stdout for the commands' help.
func withLogger(ctx context.Context, log *slog.Logger, level *slog.LevelVar, stdout io.Writer) context.Context {
	return context.WithValue(ctx, logKey{}, logState{log, level, stdout})
}

// logger is the logger in ctx; without one (a test calling a run function
// directly) messages go nowhere.
func logger(ctx context.Context) *slog.Logger {
	if ls, ok := ctx.Value(logKey{}).(logState); ok {
		return ls.log
	}
	return slog.New(slog.DiscardHandler)
}
