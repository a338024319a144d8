package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"unicode"

	reelroot "github.com/reel-runtime/reel"
	"github.com/reel-runtime/reel/models/dory"
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
)

// modelFlags are the flags every command that runs a model shares.
type modelFlags struct {
	dir         string
	device      string
	threads     int
	kv          string
	gate        string
	chunk       int
	promptLoops int
	cuda        cudaFlags
	// reuseLogits: the command samples each token's logits and drops them
	// (dory.Options.ReuseLogits).
	reuseLogits bool
}

func (f *modelFlags) register(fs *flag.FlagSet, defaultModel bool) {
	help := "checkpoint folder (config.json + safetensors)"
	if defaultModel {
		help += "; default: the embedded " + reelroot.DefaultModelName
	}
	fs.StringVar(&f.dir, "model", "", help)
	fs.StringVar(&f.device, "device", "cpu", "backend: cpu or cuda")
	fs.IntVar(&f.threads, "threads", 0, "CPU goroutines per kernel (0: every core)")
	fs.StringVar(&f.kv, "kv", "", "override the KV cache mode: per_loop or last_loop")
	fs.StringVar(&f.gate, "gate", "none", "early-exit gate: none, conf:THRESHOLD or recon (needs last_loop)")
	fs.IntVar(&f.chunk, "chunk", dory.DefaultChunk, "rows of a prompt chunk")
	fs.IntVar(&f.promptLoops, "prompt-loops", 0, "loops of chunks whose logits nobody reads, on last_loop (0: all)")
	fs.BoolVar(&f.cuda.graphs, "graphs", true, "cuda: record decode plans as CUDA graphs and replay them (false: launch eagerly; REEL_GRAPHS=0 too)")
	fs.BoolVar(&f.cuda.f32AsBF16, "f32-as-bf16", false, "cuda: store f32 matrices as bf16")
}

// openBackend opens the backend a --device names.
func (f *modelFlags) openBackend() (ops.Backend, error) {
	switch f.device {
	case "cpu":
		return cpu.New(f.threads), nil
	case "cuda":
		return openCUDA(f.cuda)
	}
	return nil, usagef("unknown --device %q (want cpu or cuda)", f.device)
}

// loaded is a model and a session on it.
type loaded struct {
	model   *dory.Model
	session *dory.Session
	be      ops.Backend
}

func (l *loaded) Close() {
	if l.session != nil {
		l.session.Close()
	}
	if l.be != nil {
		l.be.Close()
	}
	if l.model != nil {
		l.model.Close()
	}
}

// open loads the model the flags name (the embedded default when allowed and
// none is given) and starts a session on the chosen backend.
func (f *modelFlags) open(ctx context.Context, defaultModel bool) (*loaded, error) {
	log := logger(ctx)
	dir := f.dir
	if dir == "" {
		if !defaultModel {
			return nil, usagef("--model is required")
		}
		d, err := reelroot.DefaultModelDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	m, err := dory.Load(dir)
	if err != nil {
		return nil, err
	}
	log.Debug("model loaded", "dir", dir, "parameters", m.Parameters())
	return f.session(ctx, m)
}

// session starts a session on m with the flags' options.
func (f *modelFlags) session(ctx context.Context, m *dory.Model) (*loaded, error) {
	l := &loaded{model: m}
	opts := dory.Options{Chunk: f.chunk, PromptLoops: f.promptLoops, Logger: logger(ctx), ReuseLogits: f.reuseLogits}
	if f.kv != "" {
		mode, err := dory.ParseKVMode(f.kv)
		if err != nil {
			l.Close()
			return nil, usagef("--kv: %v", err)
		}
		opts.KV = &mode
	}
	g, err := dory.ParseGate(f.gate)
	if err != nil {
		l.Close()
		return nil, usagef("--gate: %v", err)
	}
	opts.Gate = g
	if l.be, err = f.openBackend(); err != nil {
		l.Close()
		return nil, err
	}
	opts.Backend = l.be
	if l.session, err = dory.NewSession(m, opts); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// parseIDs reads "1,2,3" (or ids separated by whitespace, or both).
func parseIDs(s string) ([]int, error) {
	var ids []int
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("token %d: %q is not an integer id", i, f)
		}
		ids = append(ids, v)
	}
	return ids, nil
}

// debugStats logs an engine's counters.
func debugStats(log *slog.Logger, s *dory.Session) {
	st := s.Stats()
	log.Debug("plans", "keys", st.Plans, "records", st.Records, "updates", st.Updates, "replays", st.Hits)
}
