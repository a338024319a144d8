// Package models is the registry of architectures: each package under
// models/ registers itself by the config.json model_type values (and
// architectures) it reads, and the reel command finds a checkpoint's
// architecture here, with no code of its own for any model.
//
// A model package registers in its init function, the way image formats
// and database drivers do; the registry is written only then:
//
//	func init() {
//		models.Register(models.Arch{Name: "llama", ModelTypes: []string{"llama", "qwen3"}, Load: load})
//	}
//
// and a program that wants every architecture imports models/all.
package models

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"

	"gorgonia.org/tensor"

	"github.com/reel-runtime/reel/capture"
	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/planner"
	"github.com/reel-runtime/reel/weights"
)

// An Arch is an architecture the commands can run.
type Arch struct {
	// Name names the architecture in messages (its package's name).
	Name string
	// ModelTypes are the config.json model_type values it reads.
	ModelTypes []string
	// Architectures are config.json architectures it reads (a checkpoint
	// whose model_type is unknown is looked up by these).
	Architectures []string
	// Load reads a checkpoint folder.
	Load func(dir string) (Model, error)
	// LoadQuantized, when set, reads a checkpoint folder quantizing its
	// projections at load in a format ("fp8", "q8", "q4"; see lm.Quant).
	LoadQuantized func(dir, quant string) (Model, error)
	// Synthetic makes models of known shapes with random weights (for
	// benchmarks and dumps), by shape name; dt is the matrices' dtype.
	// progress (when not nil) is told the bytes made: a released shape's
	// gigabytes take a minute.
	Synthetic map[string]func(dt graph.DType, seed uint64, progress lm.Progress) (Model, error)
	// Deferred makes models of known shapes whose matrices are made where
	// the model is uploaded, by shape name (lm.SynthesizeDeferred): on the
	// backend (ops.RandomLoader), without the host holding them. A shape
	// of both maps is the same model either way, byte for byte; a shape
	// too large for the host is here only.
	Deferred map[string]func(dt graph.DType, seed uint64) (Model, error)
	// Shapes makes the same models with weights of no values (their
	// graphs, for dumps, without making gigabytes), by shape name.
	Shapes map[string]func() (Model, error)
	// InfoFields are config.json fields of its own that reel info shows
	// (beside the sizes every decoder has).
	InfoFields []string
	// Params are the options of its sessions that are its own (Dory's
	// loops, say), which the commands offer as flags.
	Params []Param
}

// A Param is a session option of one architecture, offered as a flag.
type Param struct {
	Name, Usage string
}

// Options are a session's options: those every model takes, and the
// architecture's own by Param name (the flags a user set).
type Options struct {
	lm.SessionOptions
	Params map[string]string
	// Drafting says the session will draft tokens (models.Drafter): a
	// model runs its draft head, and keeps its caches, only then.
	Drafting bool
}

// CheckParams says whether o sets only params of known, naming the first
// one that is not (as the flag a user gave).
func (o Options) CheckParams(arch string, known ...string) error {
	for _, n := range slices.Sorted(maps.Keys(o.Params)) {
		if !slices.Contains(known, n) {
			return fmt.Errorf("--%s: a %s model has no such option", n, arch)
		}
	}
	return nil
}

// Int reads the param of name as an integer, def when unset; an error
// names the flag.
func (o Options) Int(name string, def int) (int, error) {
	v, ok := o.Params[name]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: not an integer", name, v)
	}
	return n, nil
}

// OnOff reads the param of name as on or off (true or false), def when
// unset; an error names the flag.
func (o Options) OnOff(name string, def bool) (bool, error) {
	switch v := o.Params[name]; v {
	case "":
		return def, nil
	case "on":
		return true, nil
	case "off":
		return false, nil
	default:
		return false, fmt.Errorf("--%s %q: want on or off", name, v)
	}
}

// Model is a loaded model as the commands use it.
type Model interface {
	// Arch is the architecture's name.
	Arch() string
	// Vocab is the length of a row of logits.
	Vocab() int
	// Parameters counts the weights' elements.
	Parameters() int
	// NewSession starts a session.
	NewSession(o Options) (Session, error)
	// Stages names the graphs a dump can show, the graph of a plain
	// forward chunk first ("forward"; Dory's "all").
	Stages() []string
	// Graph builds the graph of a stage for a chunk of rows whose logits
	// are want, for dumps (o's params may change it: Dory's loops).
	Graph(stage string, rows int, want lm.Want, o Options) (*graph.Graph, error)
	// Close releases the checkpoint's files.
	Close() error
}

// Session is a session as the commands drive it; *lm.Session is one.
type Session interface {
	// Forward runs ids at positions pos0 (= Pos()), pos0+1, ... and gives
	// the wanted rows' logits [rows, vocab] (nil for lm.WantNone).
	Forward(ids []int, pos0 int, want lm.Want) (*tensor.Dense, error)
	// Pos is the positions the session holds: the next pos0.
	Pos() int
	// Rollback forgets the positions from n on, where the states allow.
	Rollback(n int) error
	// Reset empties the session.
	Reset()
	// Stats are the plan cache's counters.
	Stats() capture.Stats
	// Close frees the session's buffers.
	Close() error
}

// Planner is a session that gives the plan it built for a plain forward
// chunk and times its launches, for benchmarks; *lm.Session is one.
type Planner interface {
	// ForwardPlan is the plan of a forward chunk of rows, once it has run.
	ForwardPlan(rows int, want lm.Want) (*planner.Planned, planner.Report, bool)
	// ForwardProfile times that plan's launches op by op.
	ForwardProfile(rows int, want lm.Want) ([]capture.OpTime, error)
	// AblateForward measures what each op of that plan costs inside a
	// replay, each replay from the recurrent states as they stood; the
	// session is broken afterwards, until a Reset.
	AblateForward(rows int, want lm.Want, reps int) (capture.Ablation, error)
}

// ByteLevel is a model whose token ids are byte values (text in and out
// without a tokenizer).
type ByteLevel interface {
	ByteTokens() bool
}

// Drafter is a session that drafts tokens and verifies them in one
// speculation window (a multi-token prediction head).
type Drafter interface {
	// CanDraft says whether the session has a head to draft with.
	CanDraft() bool
	// Draft drafts n tokens greedily after next (the token at Pos()).
	Draft(next, n int) ([]int, error)
	// VerifyFunc runs next and drafts in one window, accepting drafts in
	// order while accept says so; it returns how many it accepted and the
	// logits of the last accepted row.
	VerifyFunc(next int, drafts []int, accept func(logits []float32, draft int) bool) (int, []float32, error)
}

// Reporter is a session with lines of its own to add to a run's or a
// benchmark's report (an early-exit gate's decisions, its loops).
type Reporter interface {
	Report() []string
}

// Quantizer is a model that quantizes its projections in a format ("fp8",
// "q8", "q4"; see lm.Quant), as LoadQuantized does at load, for a model
// made without a checkpoint (a synthetic one). The receiver is spent: the
// model returned holds what it held (a checkpoint's mappings), and closing
// it closes them. A model of shapes only gives the graphs of the format.
type Quantizer interface {
	Quantize(quant string, progress lm.Progress) (Model, error)
}

// Weighted is a model that gives its weights as loaded, by graph weight
// name: the codes and scales of the projections quantized at load among
// them (reel quantize writes those). The tensors are the model's: not to
// be changed, and valid until it is closed.
type Weighted interface {
	Weights() lm.Tensors
}

// Sourced is a Weighted model some of whose weights are not the
// checkpoint's tensors of their names: made of several (experts stored
// one by one, stacked at load), or stored under a prefix of the
// checkpoint's own. Source gives where a checkpoint written with the
// weight of graph name stores it, and the tensors of the model's
// checkpoint it replaces there ("", nil for a weight the checkpoint does
// not hold).
type Sourced interface {
	Source(name string) (stored string, from []string)
}

// registry holds the architectures by model_type and by architecture
// name. It is written by Register in init functions only.
var registry struct {
	sync.RWMutex
	byType, byArch map[string]*Arch
	all            []*Arch
}

// Register adds an architecture. A model_type or architecture registered
// twice is a programming error and panics, as a second image format or
// database driver of one name does.
func Register(a Arch) {
	registry.Lock()
	defer registry.Unlock()
	if a.Name == "" || a.Load == nil || len(a.ModelTypes) == 0 {
		panic("models: Register needs a name, a Load and a model_type")
	}
	if registry.byType == nil {
		registry.byType, registry.byArch = map[string]*Arch{}, map[string]*Arch{}
	}
	p := &a
	for _, t := range a.ModelTypes {
		if registry.byType[t] != nil {
			panic("models: model_type " + t + " registered twice")
		}
		registry.byType[t] = p
	}
	for _, n := range a.Architectures {
		if registry.byArch[n] != nil {
			panic("models: architecture " + n + " registered twice")
		}
		registry.byArch[n] = p
	}
	registry.all = append(registry.all, p)
}

// All lists the registered architectures by name.
func All() []Arch {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]Arch, 0, len(registry.all))
	for _, a := range registry.all {
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ModelTypes lists every registered model_type, sorted.
func ModelTypes() []string {
	var out []string
	for _, a := range All() {
		out = append(out, a.ModelTypes...)
	}
	slices.Sort(out)
	return out
}

// Lookup finds the architecture of a config.json's model_type, or else of
// one of its architectures.
func Lookup(modelType string, architectures ...string) (Arch, bool) {
	registry.RLock()
	defer registry.RUnlock()
	if a := registry.byType[modelType]; a != nil {
		return *a, true
	}
	for _, n := range architectures {
		if a := registry.byArch[n]; a != nil {
			return *a, true
		}
	}
	return Arch{}, false
}

// For reads dir's config.json and finds its architecture; an unknown one is
// an error naming the model_type and what is known.
func For(dir string) (Arch, error) {
	cfg, err := weights.ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return Arch{}, err
	}
	mt, err := cfg.String("model_type", "")
	if err != nil {
		return Arch{}, err
	}
	archs, _ := cfg.Strings("architectures")
	a, ok := Lookup(mt, archs...)
	if !ok {
		return Arch{}, fmt.Errorf("%s: model_type %q (architectures %q) is not one Reel runs: it knows %q", cfg.Path(), mt, archs, ModelTypes())
	}
	return a, nil
}

// Load reads the checkpoint in dir with its architecture's loader.
func Load(dir string) (Model, error) {
	a, err := For(dir)
	if err != nil {
		return nil, err
	}
	return a.Load(dir)
}

// ErrNotQuantized is the error, wrapped with the flag and the
// architecture, of LoadQuantized and Quantize for an architecture that
// does not quantize its weights.
var ErrNotQuantized = errors.New("cannot be quantized")

// LoadQuantized is Load, quantizing the checkpoint's projections at load
// in the format quant names ("fp8", "q8", "q4"; "" is Load); an
// architecture that cannot is an error.
func LoadQuantized(dir, quant string) (Model, error) {
	if quant == "" {
		return Load(dir)
	}
	a, err := For(dir)
	if err != nil {
		return nil, err
	}
	if a.LoadQuantized == nil {
		return nil, fmt.Errorf("--quant %s: a %s model %w", quant, a.Name, ErrNotQuantized)
	}
	return a.LoadQuantized(dir, quant)
}

// Quantize quantizes m's projections in the format quant names (see
// Quantizer; "" gives m back); a model that cannot is an error naming the
// flag and its architecture.
func Quantize(m Model, quant string, progress lm.Progress) (Model, error) {
	if quant == "" {
		return m, nil
	}
	q, ok := m.(Quantizer)
	if !ok {
		return nil, fmt.Errorf("--quant %s: a %s model %w", quant, m.Arch(), ErrNotQuantized)
	}
	return q.Quantize(quant, progress)
}

// Synthetic finds a synthetic shape by name across the architectures (made
// on the host, Arch.Synthetic, or where it is uploaded, Arch.Deferred).
func Synthetic(name string) (Arch, bool) {
	for _, a := range All() {
		if a.Synthetic[name] != nil || a.Deferred[name] != nil {
			return a, true
		}
	}
	return Arch{}, false
}

// SyntheticNames lists every synthetic shape, sorted.
func SyntheticNames() []string {
	var out []string
	for _, a := range All() {
		for n := range a.Synthetic {
			out = append(out, n)
		}
		for n := range a.Deferred {
			if a.Synthetic[n] == nil {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}
