package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/sample"
	"github.com/reel-runtime/reel/tokenizer"
	"github.com/reel-runtime/reel/weights"
)

// genFlags are the flags of the commands that generate (run and chat): the
// tokenizer, the sampler's settings, the stop rules and speculation.
type genFlags struct {
	tokenizer string
	// the sampler's settings (sample.Options)
	temperature, topP, minP         float64
	repetition, presence, frequency float64
	topK                            int
	seed                            uint64
	// the stop rules
	stops  stringList
	tokens int
	// draft is the tokens a draft head drafts a step (0: none).
	draft int
	// set are the flags the user gave (flag.FlagSet.Visit after parsing).
	set map[string]bool
}

// samplingDefaults are the sampler's settings where neither the flags nor
// the checkpoint's generation_config.json give one.
func samplingDefaults() sample.Options {
	return sample.Options{Temperature: 0.8, TopK: 40, TopP: 1, RepetitionPenalty: 1, Seed: 1}
}

// register adds the flags to fs; tokens is --tokens' default.
func (f *genFlags) register(fs *flag.FlagSet, tokens int) {
	d := samplingDefaults()
	const file = "; when not given, generation_config.json's"
	fs.StringVar(&f.tokenizer, "tokenizer", "", "folder of tokenizer.json (or the file); default: the model's folder")
	fs.Float64Var(&f.temperature, "temperature", d.Temperature, "sampling temperature, 0: greedy"+file)
	fs.IntVar(&f.topK, "top-k", d.TopK, "sample among the k most likely tokens, 0: all"+file)
	fs.Float64Var(&f.topP, "top-p", d.TopP, "sample among the most likely tokens whose probabilities add up to p, 1: all"+file)
	fs.Float64Var(&f.minP, "min-p", d.MinP, "drop tokens less likely than p times the most likely one, 0: none"+file)
	fs.Float64Var(&f.repetition, "repetition-penalty", d.RepetitionPenalty, "divide the logits of tokens of the prompt and the output by r (negative ones: multiply), 1: off"+file)
	fs.Float64Var(&f.presence, "presence-penalty", d.PresencePenalty, "subtract from the logits of tokens generated before")
	fs.Float64Var(&f.frequency, "frequency-penalty", d.FrequencyPenalty, "subtract this times the count of each token generated before from its logit")
	fs.Uint64Var(&f.seed, "seed", d.Seed, "seed of the sampler")
	fs.Var(&f.stops, "stop", "stop where the text holds `STRING`, which is not shown (repeatable)")
	fs.IntVar(&f.tokens, "tokens", tokens, "most tokens to generate, 0: no limit; when not given, generation_config.json's max_new_tokens")
	fs.IntVar(&f.draft, "draft", 0, "models with a draft head: tokens to draft a step, verified in one window")
}

// parsed notes the flags the user gave and checks the values that need no
// model; call it after parseFlags.
func (f *genFlags) parsed(fs *flag.FlagSet, chunk int) error {
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if f.tokens < 0 {
		return usagef("--tokens %d is negative", f.tokens)
	}
	if f.draft < 0 {
		return usagef("--draft %d is negative", f.draft)
	}
	if f.draft > 0 && f.draft >= chunk {
		return usagef("--draft %d: a window of %d rows is more than a chunk of %d (--chunk)", f.draft, f.draft+1, chunk)
	}
	if err := f.user().Validate(); err != nil {
		// name the flag: each set flag's setting checked on its own
		for _, name := range []string{"temperature", "top-k", "top-p", "min-p", "repetition-penalty", "presence-penalty", "frequency-penalty"} {
			if f.set[name] {
				one := genFlags{set: map[string]bool{name: true}, temperature: f.temperature, topK: f.topK, topP: f.topP,
					minP: f.minP, repetition: f.repetition, presence: f.presence, frequency: f.frequency}
				if e := one.user().Validate(); e != nil {
					return usagef("--%s %s: %v", name, fs.Lookup(name).Value, e)
				}
			}
		}
		return usagef("%v", err)
	}
	for _, s := range f.stops {
		if s == "" {
			return usagef("--stop: an empty stop string")
		}
	}
	return nil
}

// user are the sampler's settings the user gave.
func (f *genFlags) user() sample.Params {
	var p sample.Params
	pick := func(name string, dst **float64, v *float64) {
		if f.set[name] {
			*dst = v
		}
	}
	pick("temperature", &p.Temperature, &f.temperature)
	pick("top-p", &p.TopP, &f.topP)
	pick("min-p", &p.MinP, &f.minP)
	pick("repetition-penalty", &p.RepetitionPenalty, &f.repetition)
	pick("presence-penalty", &p.PresencePenalty, &f.presence)
	pick("frequency-penalty", &p.FrequencyPenalty, &f.frequency)
	if f.set["top-k"] {
		p.TopK = &f.topK
	}
	if f.set["seed"] {
		p.Seed = &f.seed
	}
	return p
}

// open reads the checkpoint's generation defaults and makes the flags'
// sampler over them, then opens the model of mf (the embedded default when
// allowed) with a session that drafts when --draft asks.
func (f *genFlags) open(ctx context.Context, mf *modelFlags, defaultModel bool) (*loaded, generation, *sample.Sampler, error) {
	gen, err := loadGeneration(mf.dir)
	if err != nil {
		return nil, gen, nil, err
	}
	smp, err := f.sampler(gen)
	if err != nil {
		return nil, gen, nil, err
	}
	mf.drafting = f.draft > 0
	l, err := mf.open(ctx, defaultModel)
	return l, gen, smp, err
}

// sampler makes the sampler of the flags over the checkpoint's defaults.
func (f *genFlags) sampler(g generation) (*sample.Sampler, error) {
	o, err := sample.Resolve(samplingDefaults(), g.config.Sampling(), f.user())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", g.source, err)
	}
	return sample.NewSampler(o)
}

// stopping gives the stop rules: the end-of-sequence ids of the
// checkpoint's generation_config.json and of the tokenizer's config, the
// --stop strings, and --tokens (else the file's max_new_tokens).
func (f *genFlags) stopping(g generation, t textIO) (sample.StopOptions, error) {
	o := g.config.Stopping()
	if f.set["tokens"] || g.config.MaxNewTokens == nil {
		o.MaxTokens = f.tokens
	}
	if t.tok != nil {
		if eos := t.tok.Config().EOS; eos != "" {
			if id, ok := t.tok.TokenID(eos); ok && !slices.Contains(o.EOS, id) {
				o.EOS = append(o.EOS, id)
			}
		}
	}
	if len(f.stops) > 0 && t.ids() {
		return o, usagef("--stop needs text: the model has no tokenizer and its tokens are not bytes (give --tokenizer)")
	}
	o.Strings = f.stops
	return o, o.Validate()
}

// stringList is a flag that may be given several times.
type stringList []string

func (s *stringList) String() string {
	if s == nil {
		return ""
	}
	return strings.Join(*s, ", ")
}

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// generation is a checkpoint's generation_config.json and where it came
// from.
type generation struct {
	config weights.GenerationConfig
	source string // the file, for messages
}

// loadGeneration reads the generation_config.json of the model folder dir
// (none for "": the embedded model).
func loadGeneration(dir string) (generation, error) {
	if dir == "" {
		return generation{source: "defaults"}, nil
	}
	g, err := weights.LoadGenerationConfig(dir)
	return generation{config: g, source: filepath.Join(dir, weights.GenerationFile)}, err
}

// textIO is how a model's token ids meet text: through a tokenizer, as the
// byte values of a byte-level model, or (neither) as bare ids.
type textIO struct {
	tok   *tokenizer.Tokenizer // nil: bytes or bare ids
	bytes bool                 // no tokenizer, and the model's ids are bytes
}

// openTextIO finds the tokenizer of a model: --tokenizer's (path), else the
// model folder's tokenizer.json (dir, "" for the embedded model). Without
// one, a byte-level model reads and writes bytes, and any other bare ids.
// A tokenizer with ids outside the model's vocabulary is an error naming
// both sizes.
func openTextIO(path, dir string, m models.Model) (textIO, error) {
	if path == "" && dir != "" && hasTokenizer(dir) {
		path = dir
	}
	if path == "" {
		bl, _ := m.(models.ByteLevel)
		return textIO{bytes: bl != nil && bl.ByteTokens()}, nil
	}
	tok, err := loadTokenizer(path)
	if err != nil {
		return textIO{}, fmt.Errorf("tokenizer: %w", err)
	}
	if err := tok.CheckVocab(m.Vocab()); err != nil {
		return textIO{}, fmt.Errorf("%s: %w", path, err)
	}
	return textIO{tok: tok}, nil
}

// hasTokenizer says whether the folder dir holds a tokenizer.json (or its
// gzipped form).
func hasTokenizer(dir string) bool {
	for _, name := range []string{"tokenizer.json", "tokenizer.json.gz"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

// ids says whether the model's tokens have no text.
func (t textIO) ids() bool { return t.tok == nil && !t.bytes }

// encode gives the ids of a prompt text; with special, as the tokenizer
// adds special tokens to a single text (the post-processor's, and the BOS
// tokenizer_config.json's add_bos_token asks for).
func (t textIO) encode(text string, special bool) ([]int, error) {
	switch {
	case t.tok != nil:
		ids, err := t.tok.Encode(text, special)
		if err != nil {
			return nil, err
		}
		if c := t.tok.Config(); special && c.AddBOS && c.BOS != "" {
			if bos, ok := t.tok.TokenID(c.BOS); ok && (len(ids) == 0 || ids[0] != bos) {
				ids = append([]int{bos}, ids...)
			}
		}
		return ids, nil
	case t.bytes:
		ids := make([]int, len(text))
		for i := range len(text) {
			ids[i] = int(text[i])
		}
		return ids, nil
	}
	return nil, errors.New("the model has no tokenizer and its tokens are not bytes: give --tokenizer DIR or --prompt-ids")
}

// decoder turns generated ids into text as they come.
type decoder interface {
	// Next gives the text that id completes.
	Next(id int) (string, error)
	// Flush gives the text held back.
	Flush() (string, error)
}

// stream starts a decoder: the tokenizer's streaming decoder (special
// tokens skipped), bytes as they are, or ids each followed by a space.
func (t textIO) stream() decoder {
	switch {
	case t.tok != nil:
		return tokenDecoder{t.tok.NewStream(true)}
	case t.bytes:
		return byteDecoder{}
	}
	return idDecoder{}
}

// tokenDecoder is a tokenizer's stream to which an id it does not have (a
// row of a model's vocabulary padded past the tokenizer's) is no text.
type tokenDecoder struct{ s *tokenizer.Stream }

func (d tokenDecoder) Next(id int) (string, error) {
	text, err := d.s.Next(id)
	if err != nil {
		return "", nil // the stream stands as it was
	}
	return text, nil
}

func (d tokenDecoder) Flush() (string, error) { return d.s.Flush() }

type byteDecoder struct{}

func (byteDecoder) Next(id int) (string, error) { return string([]byte{byte(id)}), nil }
func (byteDecoder) Flush() (string, error)      { return "", nil }

type idDecoder struct{}

func (idDecoder) Next(id int) (string, error) { return strconv.Itoa(id) + " ", nil }
func (idDecoder) Flush() (string, error)      { return "", nil }

// checkPrompt checks a prompt's ids before anything runs: not empty, each
// inside the vocabulary.
func checkPrompt(ids []int, vocab int) error {
	if len(ids) == 0 {
		return errors.New("the prompt is empty")
	}
	return checkIDs(ids, vocab)
}

// generator decodes on a session: it samples a token, shows its text,
// feeds it back, and drafts and verifies windows of tokens when asked.
type generator struct {
	s     models.Session
	smp   *sample.Sampler
	dr    models.Drafter // with draft > 0
	draft int
}

// newGenerator makes the generator of a session; --draft needs a session
// with a draft head.
func newGenerator(s models.Session, smp *sample.Sampler, draft int) (*generator, error) {
	g := &generator{s: s, smp: smp, draft: draft}
	if draft > 0 {
		dr, _ := s.(models.Drafter)
		if dr == nil || !dr.CanDraft() {
			return nil, usagef("--draft %d: the model has no draft head", draft)
		}
		g.dr = dr
	}
	return g, nil
}

// generated is what one generation made.
type generated struct {
	// ids are the tokens generated, the one that stopped generation (an
	// end-of-sequence id) included.
	ids []int
	// fed are the ids fed to the session (all of ids but the last, and
	// drafts accepted past a stop).
	fed []int
	// text is the text shown.
	text string
	// reason says why generation stopped.
	reason sample.Reason
	// decode is the time from the first token to the end.
	decode time.Duration
	// windows, drafted and accepted count the speculation.
	windows, drafted, accepted int
}

// run generates from the logits of the last position the session holds
// until the stop rules say so or ctx is done, writing the text as it comes
// to w (flushed after every token). The text of an end-of-sequence id is
// never shown; at the end, the text held back (by the decoder, or by the
// stopper for a stop string that did not come) is, unless a stop string
// ended generation.
func (g *generator) run(ctx context.Context, logits []float32, so sample.StopOptions, dec decoder, w *bufio.Writer) (generated, error) {
	stop, err := sample.NewStopper(so)
	if err != nil {
		return generated{}, err
	}
	eos := map[int]bool{}
	for _, id := range so.EOS {
		eos[id] = true
	}
	var r generated
	var text strings.Builder
	show := func(s string) {
		w.WriteString(s)
		text.WriteString(s)
	}
	// push shows a generated token and says whether generation stops.
	push := func(id int) (bool, error) {
		r.ids = append(r.ids, id)
		piece := ""
		if !eos[id] {
			var err error
			if piece, err = dec.Next(id); err != nil {
				return true, err
			}
		}
		s, done := stop.Push(id, piece)
		show(s)
		return done, nil
	}
	t0 := time.Now()
	finish := func(err error) (generated, error) {
		if stop.Reason() == sample.NotStopped { // cancelled, or failed
			show(stop.Flush())
		}
		if stop.Reason() != sample.StopString {
			tail, ferr := dec.Flush()
			show(tail)
			err = errors.Join(err, ferr)
		}
		r.decode = time.Since(t0)
		r.reason, r.text = stop.Reason(), text.String()
		return r, errors.Join(err, w.Flush())
	}
	next := g.smp.Next(logits)
	for {
		if err := ctx.Err(); err != nil {
			return finish(err)
		}
		if done, err := push(next); done || err != nil {
			return finish(err)
		}
		if err := w.Flush(); err != nil {
			return finish(err)
		}
		if g.draft == 0 {
			d, err := g.s.Forward([]int{next}, g.s.Pos(), lm.WantLast)
			if err != nil {
				return finish(err)
			}
			r.fed = append(r.fed, next)
			next = g.smp.Next(d.Data().([]float32))
			continue
		}
		n := g.draft
		if so.MaxTokens > 0 {
			n = min(n, so.MaxTokens-stop.Tokens())
		}
		drafts, err := g.dr.Draft(next, n)
		if err != nil {
			return finish(err)
		}
		a, lg, err := g.dr.VerifyFunc(next, drafts, g.smp.Accept)
		if err != nil {
			return finish(err)
		}
		r.fed = append(append(r.fed, next), drafts[:a]...)
		r.windows, r.drafted, r.accepted = r.windows+1, r.drafted+len(drafts), r.accepted+a
		for _, d := range drafts[:a] {
			if done, err := push(d); done || err != nil {
				return finish(err)
			}
		}
		if a < len(drafts) {
			next = g.smp.NextExcept(lg, drafts[a])
		} else {
			next = g.smp.Next(lg)
		}
	}
}
