package sample

import (
	"errors"
	"fmt"
)

// Params are sampling settings each of which may be unset (nil): a
// checkpoint's defaults (its generation_config.json, read by package
// weights) or what a user asked for. Resolve merges them into Options.
type Params struct {
	// DoSample false asks for greedy decoding (transformers' do_sample).
	DoSample *bool
	// The others are the Options of the same names.
	Temperature       *float64
	TopK              *int
	TopP              *float64
	MinP              *float64
	RepetitionPenalty *float64
	PresencePenalty   *float64
	FrequencyPenalty  *float64
	Seed              *uint64
}

// Validate checks the settings that are set, naming each one out of range.
// It is stricter than Options.Validate, which reads 0 as "off": a top-p
// that is set must be in (0, 1] and a repetition penalty above 0.
func (p Params) Validate() error {
	err := p.over(Options{TopP: 1, RepetitionPenalty: 1}).Validate()
	var errs []error
	if p.TopP != nil && *p.TopP == 0 {
		errs = append(errs, errors.New("sample: top-p 0 is outside (0, 1]"))
	}
	if p.RepetitionPenalty != nil && *p.RepetitionPenalty == 0 {
		errs = append(errs, errors.New("sample: repetition penalty 0 must be a finite positive number (1: off)"))
	}
	return errors.Join(append([]error{err}, errs...)...)
}

// over returns o with the settings of p that are set in place of its own
// (DoSample aside).
func (p Params) over(o Options) Options {
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&o.Temperature, p.Temperature)
	set(&o.TopP, p.TopP)
	set(&o.MinP, p.MinP)
	set(&o.RepetitionPenalty, p.RepetitionPenalty)
	set(&o.PresencePenalty, p.PresencePenalty)
	set(&o.FrequencyPenalty, p.FrequencyPenalty)
	if p.TopK != nil {
		o.TopK = *p.TopK
	}
	if p.Seed != nil {
		o.Seed = *p.Seed
	}
	return o
}

// Resolve makes a sampler's Options from the caller's defaults, a
// checkpoint's settings (file) and the user's (user), each checked first.
// Every setting is the user's if set, else the file's, else the default.
// The temperature follows do_sample as transformers does, except that a
// temperature the user sets always wins:
//
//   - the user's temperature, if set;
//   - else 0 (greedy) when do_sample (the user's, else the file's) is false;
//   - else the file's temperature, if set;
//   - else the default, or 1 (transformers' default) when do_sample is
//     true and the default is 0.
func Resolve(defaults Options, file, user Params) (Options, error) {
	if err := defaults.Validate(); err != nil {
		return Options{}, fmt.Errorf("defaults: %w", err)
	}
	if err := file.Validate(); err != nil {
		return Options{}, fmt.Errorf("generation config: %w", err)
	}
	if err := user.Validate(); err != nil {
		return Options{}, err
	}
	o := user.over(file.over(defaults))
	doSample := user.DoSample
	if doSample == nil {
		doSample = file.DoSample
	}
	switch {
	case user.Temperature != nil:
	case doSample != nil && !*doSample:
		o.Temperature = 0
	case doSample != nil && file.Temperature == nil && o.Temperature == 0:
		o.Temperature = 1
	}
	return o, nil
}
