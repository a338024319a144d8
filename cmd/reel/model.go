package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"unicode"

	reelroot "github.com/reel-runtime/reel"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	_ "github.com/reel-runtime/reel/models/all" // every architecture
	"github.com/reel-runtime/reel/ops"
	"github.com/reel-runtime/reel/ops/cpu"
)

// modelFlags are the flags every command that runs a model shares: the
// model (a checkpoint folder, or a synthetic shape where the command takes
// one), the backend, the session's options, and each architecture's own
// options (models.Arch.Params), which a model of another architecture
// refuses.
type modelFlags struct {
	dir     string
	device  string
	threads int
	chunk   int
	buckets bucketsFlag
	quant   string // --quant: the format to quantize at load, or ""
	cuda    cudaFlags
	params  map[string]*string
	// reuseLogits: the command samples each token's logits and drops them
	// (lm.SessionOptions.ReuseLogits).
	reuseLogits bool
	// drafting: the command drafts tokens (models.Options.Drafting).
	drafting bool
	// progress is --progress; stderr is where progress lines go (the flag
	// set's output, the command's stderr).
	progress progressFlag
	stderr   io.Writer
}

func (f *modelFlags) register(fs *flag.FlagSet, defaultModel bool) {
	help := "checkpoint folder (config.json + safetensors)"
	if defaultModel {
		help += "; default: the embedded " + reelroot.DefaultModelName
	}
	fs.StringVar(&f.dir, "model", "", help)
	fs.StringVar(&f.device, "device", "cpu", "backend: cpu or cuda")
	fs.IntVar(&f.threads, "threads", 0, "CPU goroutines per kernel (0: every core)")
	fs.IntVar(&f.chunk, "chunk", 0, fmt.Sprintf("rows of a prompt chunk (0: %d on cuda, the fastest measured on the H200; %d on cpu)", cudaChunk, lm.DefaultChunk))
	fs.Var(&f.buckets, "buckets", fmt.Sprintf("a prompt chunk runs the plan of the smallest row bucket that holds it, so prompts of nearby lengths share one plan: "+
		"N buckets per doubling of rows from %d, up to the chunk (%d: %s; 1: %s), or off: a plan per length (0: the device's default, %d on cuda, off on cpu, where a plan costs little to build and a padded row its whole arithmetic)",
		lm.MinBucket, lm.DefaultBuckets, bucketLadder(lm.DefaultBuckets), bucketLadder(1), lm.DefaultBuckets))
	registerQuant(fs, &f.quant)
	fs.BoolVar(&f.cuda.graphs, "graphs", true, "cuda: record decode plans as CUDA graphs and replay them (false: launch eagerly; REEL_GRAPHS=0 too)")
	fs.BoolVar(&f.cuda.f32AsBF16, "f32-as-bf16", false, "cuda: store f32 matrices as bf16")
	fs.Var(&f.cuda.precision, "precision", "cuda: how prompt chunks round for the tensor cores: auto (16-bit where the weights are), exact (16 bits of each activation, f32 attention) or half (f16 attention always)")
	fs.Var(&f.progress, "progress", "show the progress of long work (weights, long prompts) on stderr: true, or false (default: when stderr is a terminal)")
	f.stderr = fs.Output()
	registerParams(fs, &f.params)
}

// registerQuant adds --quant.
func registerQuant(fs *flag.FlagSet, quant *string) {
	fs.StringVar(quant, "quant", "", "quantize the model's projections at load: fp8, q8 or q4 (embeddings, norms, the head and routers stay as stored)")
}

// checkQuant checks a --quant value.
func checkQuant(quant string) error {
	switch quant {
	case "", lm.QuantFP8, lm.QuantQ8, lm.QuantQ4:
		return nil
	}
	return usagef("--quant %q: want fp8, q8 or q4", quant)
}

// loadModel loads the checkpoint in dir quantized at load as --quant says;
// an architecture that cannot quantize is a usage error naming the flag.
func loadModel(dir, quant string) (models.Model, error) {
	m, err := models.LoadQuantized(dir, quant)
	if err != nil && errors.Is(err, models.ErrNotQuantized) {
		return nil, usagef("%v", err)
	}
	return m, err
}

// registerParams adds a string flag for every architecture's params (one
// flag for a name two architectures share).
func registerParams(fs *flag.FlagSet, params *map[string]*string) {
	*params = map[string]*string{}
	usage := map[string][]string{}
	var names []string
	for _, a := range models.All() {
		for _, p := range a.Params {
			if _, ok := usage[p.Name]; !ok {
				names = append(names, p.Name)
			}
			usage[p.Name] = append(usage[p.Name], p.Usage)
		}
	}
	for _, n := range names {
		(*params)[n] = fs.String(n, "", strings.Join(usage[n], "; "))
	}
}

// options are the session options the flags give.
func (f *modelFlags) options(ctx context.Context, be ops.Backend) models.Options {
	o := models.Options{SessionOptions: lm.SessionOptions{
		Options:     lm.Options{Backend: be, Logger: logger(ctx), Progress: progressFunc(f.progressTo(), "loading weights", progressBytes)},
		Chunk:       f.chunkRows(),
		Buckets:     f.buckets.n,
		ReuseLogits: f.reuseLogits,
	}, Params: map[string]string{}, Drafting: f.drafting}
	for n, v := range f.params {
		if *v != "" {
			o.Params[n] = *v
		}
	}
	return o
}

// bucketsFlag is --buckets: the row buckets per doubling that prompt
// chunks' plans are built for (lm.SessionOptions.Buckets), or off; set
// says the flag was given.
type bucketsFlag struct {
	n   int
	set bool
}

func (f *bucketsFlag) String() string {
	if f.n < 0 {
		return "off"
	}
	return strconv.Itoa(f.n)
}

func (f *bucketsFlag) Set(s string) error {
	if s == "off" {
		f.n, f.set = lm.BucketsOff, true
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > lm.MaxBuckets {
		return fmt.Errorf("want off, or 0 to %d buckets per doubling of rows", lm.MaxBuckets)
	}
	f.n, f.set = n, true
	return nil
}

// bucketLadder writes the first buckets of steps per doubling.
func bucketLadder(steps int) string {
	var out []string
	for n := lm.MinBucket; len(out) < 2*steps+1; n++ {
		if b := lm.BucketRows(n, math.MaxInt32, steps); b == n {
			out = append(out, strconv.Itoa(b))
		}
	}
	return strings.Join(out, ", ") + ", ..."
}

// cudaChunk is the default prompt chunk on CUDA: on the H200 Dory 4B
// prefills 2048 tokens at 26.3k tok/s in chunks of 2048, 22.4k in 1024 and
// 19.2k in 512 (reel bench, session 4), and a chunk's plan is kept and
// replayed for every later chunk of its length.
const cudaChunk = 2048

// chunkRows is the rows of a prompt chunk: --chunk, or the device's
// default.
func (f *modelFlags) chunkRows() int {
	switch {
	case f.chunk > 0:
		return f.chunk
	case f.device == "cuda":
		return cudaChunk
	}
	return lm.DefaultChunk
}

// progressTo is where progress lines go: stderr, when --progress or a
// terminal says so; nil for none.
func (f *modelFlags) progressTo() io.Writer { return f.progress.to(f.stderr) }

// check checks the flags that need no model.
func (f *modelFlags) check() error {
	if f.chunk < 0 {
		return usagef("--chunk %d: want at least one row (or 0, the device's default)", f.chunk)
	}
	if f.threads < 0 {
		return usagef("--threads %d is negative", f.threads)
	}
	if f.device != "cpu" && f.device != "cuda" {
		return usagef("unknown --device %q (want cpu or cuda)", f.device)
	}
	return checkQuant(f.quant)
}

// openBackend opens the backend a --device names, its messages to log.
func (f *modelFlags) openBackend(log *slog.Logger) (ops.Backend, error) {
	switch f.device {
	case "cpu":
		return cpu.New(f.threads), nil
	case "cuda":
		return openCUDA(f.cuda, log)
	}
	return nil, usagef("unknown --device %q (want cpu or cuda)", f.device)
}

// loaded is a model and a session on it.
type loaded struct {
	name    string
	model   models.Model
	session models.Session
	be      ops.Backend
}

// Close closes the session, the backend and the model.
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

// modelDir is the folder the flags name: --model, else (when allowed) the
// embedded default model.
func (f *modelFlags) modelDir(defaultModel bool) (string, error) {
	if f.dir != "" {
		return f.dir, nil
	}
	if !defaultModel {
		return "", usagef("--model is required")
	}
	return reelroot.DefaultModelDir()
}

// open loads the model the flags name (the embedded default when allowed and
// none is given), by its config's model_type, and starts a session on the
// chosen backend.
func (f *modelFlags) open(ctx context.Context, defaultModel bool) (*loaded, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	dir, err := f.modelDir(defaultModel)
	if err != nil {
		return nil, err
	}
	m, err := loadModel(dir, f.quant)
	if err != nil {
		return nil, err
	}
	name := f.dir
	if name == "" {
		name = "embedded " + reelroot.DefaultModelName
	}
	logger(ctx).Debug("model loaded", "dir", dir, "arch", m.Arch(), "parameters", m.Parameters())
	return f.start(ctx, name, m)
}

// start starts a session on m with the flags' options; on an error m is
// closed.
func (f *modelFlags) start(ctx context.Context, name string, m models.Model) (*loaded, error) {
	l := &loaded{name: name, model: m}
	var err error
	if l.be, err = f.openBackend(logger(ctx)); err != nil {
		l.Close()
		return nil, err
	}
	if l.session, err = m.NewSession(f.options(ctx, l.be)); err != nil {
		l.Close()
		var ue *usageError
		if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "--") {
			return nil, usagef("%v", err)
		}
		return nil, err
	}
	return l, nil
}

// synthetic makes the synthetic model of a known shape, refusing one the
// host cannot hold. A shape the architecture makes deferred
// (models.Arch.Deferred) has its matrices made where the session uploads
// them: on a GPU the host holds none of them (the backend refuses weights
// its free memory cannot hold, before making any), and quantizing them
// only changes what the backend makes.
func (f *modelFlags) synthetic(name, dtype string, stderr io.Writer) (models.Model, error) {
	a, ok := models.Synthetic(name)
	if !ok {
		return nil, usagef("unknown --synthetic %q (want %s)", name, strings.Join(models.SyntheticNames(), ", "))
	}
	dt, err := graph.ParseDType(dtype)
	if err != nil || (dt != graph.BF16 && dt != graph.F32) {
		return nil, usagef("--dtype %q: want bf16 or f32", dtype)
	}
	deferred := a.Deferred[name]
	if mk := a.Shapes[name]; mk != nil {
		shape, err := mk()
		if err != nil {
			return nil, err
		}
		if _, ok := shape.(models.Quantizer); f.quant != "" && !ok {
			// Said before making gigabytes of weights.
			return nil, usagef("--quant %s: a %s model %v", f.quant, shape.Arch(), models.ErrNotQuantized)
		}
		if deferred == nil || f.device == "cpu" {
			if err := checkMemory("synthetic "+name, syntheticMemory(shape.Parameters(), dt, f.device)); err != nil {
				return nil, err
			}
		}
	}
	var m models.Model
	if deferred != nil {
		fmt.Fprintf(stderr, "%s: random %s weights, made on the %s backend as they load...\n", name, dt, f.device)
		m, err = deferred(dt, 1)
	} else {
		fmt.Fprintf(stderr, "making %s with random %s weights...\n", name, dt)
		m, err = a.Synthetic[name](dt, 1, progressFunc(f.progress.to(stderr), "making "+name, progressBytes))
	}
	if err != nil || f.quant == "" {
		return m, err
	}
	fmt.Fprintf(stderr, "quantizing %s in %s...\n", name, f.quant)
	q, err := models.Quantize(m, f.quant, progressFunc(f.progress.to(stderr), "quantizing "+name, progressBytes))
	if err != nil {
		m.Close()
		if errors.Is(err, models.ErrNotQuantized) {
			return nil, usagef("%v", err)
		}
		return nil, err
	}
	return q, nil
}

// parseIDs reads "1,2,3" (ids separated by commas, whitespace or both):
// every entry an integer, none empty between two commas.
func parseIDs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var ids []int
	for i, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			return nil, fmt.Errorf("entry %d between commas is empty", i)
		}
		for _, f := range strings.FieldsFunc(part, unicode.IsSpace) {
			v, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("token %d: %q is not an integer id", len(ids), f)
			}
			ids = append(ids, v)
		}
	}
	return ids, nil
}

// checkIDs checks ids against a vocabulary before anything is printed or
// run, naming the first bad one and its position.
func checkIDs(ids []int, vocab int) error {
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("token %d: id %d is outside the vocabulary of %d", i, id, vocab)
		}
	}
	return nil
}

// debugStats logs a session's plan cache counters.
func debugStats(log *slog.Logger, s models.Session) {
	st := s.Stats()
	log.Debug("plans", "keys", st.Plans, "records", st.Records, "updates", st.Updates, "replays", st.Hits)
}

// stageNames lists a model's stages for messages: "a, b and c".
func stageNames(m models.Model) string {
	st := m.Stages()
	if len(st) < 2 {
		return strings.Join(st, "")
	}
	return strings.Join(st[:len(st)-1], ", ") + " and " + st[len(st)-1]
}
