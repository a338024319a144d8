package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/weights"
)

// maxSideFile is the largest file beside the weights that reel quantize
// copies (a tokenizer.json of a large vocabulary is tens of megabytes).
const maxSideFile = 256 << 20

func runQuantize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlags("quantize", "--model DIR --to fp8|q8|q4 --out DIR [--shard-size 2GB]", `
Quantize writes a checkpoint folder whose projections are stored quantized
in a format (see the README's "Quantized weights"): the model is loaded as
--quant quantizes it at load, so the folder written loads back with the
same weights, bit for bit. The tensors the loader quantizes are written as
their codes under their own names with their scales beside them; every
other tensor (embeddings, norms, the output head, routers) is copied as
stored. config.json gets a quantization_config; the tokenizer files,
generation_config.json and the other files beside the weights are copied.
The safetensors are sharded past --shard-size of data (a number of bytes,
or with a unit: 500MB, 2GB, 4GiB), with a model.safetensors.index.json.
The --out folder must not exist, or be empty.`, stderr)
	dir := flags.String("model", "", "checkpoint folder to quantize (config.json + safetensors) (required)")
	to := flags.String("to", "", "the format: fp8, q8 or q4 (required)")
	out := flags.String("out", "", "folder to write the quantized checkpoint to: new, or empty (required)")
	shardFlag := flags.String("shard-size", "2GB", "most bytes of tensor data a safetensors file holds")
	var prog progressFlag
	flags.Var(&prog, "progress", "show the tensors written on stderr: true, or false (default: when stderr is a terminal)")
	if err := parseFlags(ctx, flags, args); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return usagef("--model is required")
	case *to == "":
		return usagef("--to is required (fp8, q8 or q4)")
	case *out == "":
		return usagef("--out is required")
	}
	if err := checkQuant(*to); err != nil {
		return usagef("--to %q: want fp8, q8 or q4", *to)
	}
	shard, err := parseBytes(*shardFlag)
	if err != nil || shard < 1 {
		return usagef("--shard-size %q: want a positive number of bytes, with a unit or not (2GB, 500MB, 4GiB)", *shardFlag)
	}
	if err := checkOutDir(*out); err != nil {
		return err
	}
	cfg, err := weights.ReadConfig(filepath.Join(*dir, "config.json"))
	if err != nil {
		return err
	}
	if q, err := lm.ReadQuant(cfg); err != nil {
		return err
	} else if q.Method != "" {
		return fmt.Errorf("%s: quantization_config: the checkpoint is already quantized (%s)", cfg.Path(), q)
	}
	q, err := lm.DefaultQuant(*to)
	if err != nil {
		return usagef("--to: %v", err)
	}
	a, err := models.For(*dir)
	if err != nil {
		return err
	}
	if a.LoadQuantized == nil {
		return usagef("--to %s: a %s model %v", *to, a.Name, models.ErrNotQuantized)
	}
	m, err := a.LoadQuantized(*dir, *to)
	if err != nil {
		return err
	}
	defer m.Close()
	w, ok := m.(models.Weighted)
	if !ok {
		return fmt.Errorf("quantize: a %s model does not give its weights to write", m.Arch())
	}
	ck, err := weights.Open(*dir)
	if err != nil {
		return err
	}
	defer ck.Close()
	src, _ := m.(models.Sourced)
	tensors, quantized, err := quantizedTensors(ck, w.Weights(), q, src)
	if err != nil {
		return fmt.Errorf("quantize %s: %w", *dir, err)
	}
	var total int64
	for _, t := range tensors {
		total += int64(len(t.Data))
	}

	created := false
	if _, err := os.Stat(*out); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			removeWritten(*out, created)
		}
	}()
	bar := newProgress(prog.to(stderr), "writing "+*out, total, progressBytes)
	files, err := weights.WriteCheckpoint(*out, tensors, weights.WriteOptions{ShardBytes: shard, Wrote: func(n int) error {
		bar.Add(int64(n))
		return ctx.Err()
	}})
	bar.Done()
	if err != nil {
		return err
	}
	if err := writeQuantConfig(*dir, *out, q); err != nil {
		return err
	}
	copied, err := copySideFiles(ctx, *dir, *out)
	if err != nil {
		return err
	}
	done = true
	fmt.Fprintf(stdout, "wrote %s: %d tensors, %d projections in %s, %s of weights in %d files (%s)\n",
		*out, len(tensors), quantized, q, humanBytes(total), len(files), strings.Join(files, ", "))
	if len(copied) > 0 {
		fmt.Fprintf(stdout, "copied %s\n", strings.Join(copied, ", "))
	}
	return nil
}

// quantizedTensors are the tensors of a checkpoint as written quantized:
// each tensor the model holds quantized (ws: its weights loaded with q)
// and the checkpoint in a float type becomes its codes and its scales,
// every other one is the checkpoint's as stored. A model whose weights
// are not all the checkpoint's tensors of their names (src, when not nil)
// says where each quantized one goes and which tensors it replaces (a
// stack of experts stored one by one is written whole, in place of its
// first expert's). They are in the natural order of their names, a
// matrix's scales after its codes; it also gives the number of matrices
// quantized.
func quantizedTensors(ck *weights.Checkpoint, ws lm.Tensors, q lm.Quant, src models.Sourced) ([]weights.NamedTensor, int, error) {
	// at: the quantized weight each checkpoint tensor is replaced by (its
	// graph name; "" for the tensors after the first of a stack), by the
	// name it is written under.
	type place struct{ weight, stored string }
	at := map[string]place{}
	for _, n := range slices.Sorted(maps.Keys(ws)) {
		if !ws[n].DType.IsQuantized() {
			continue
		}
		stored, from := n, []string{n}
		if src != nil {
			if stored, from = src.Source(n); stored == "" {
				continue // named below: no tensor of the checkpoint holds it
			}
		}
		for i, f := range from {
			info, err := ck.Info(f)
			if err != nil || !info.DType.IsFloat() {
				break // stored quantized already, or none: copied as stored
			}
			if i == 0 {
				at[f] = place{n, stored}
			} else {
				at[f] = place{}
			}
		}
	}
	names := ck.Names()
	slices.SortFunc(names, naturalCompare)
	var out []weights.NamedTensor
	written := map[string]bool{}
	quantized := 0
	for _, n := range names {
		info, err := ck.Info(n)
		if err != nil {
			return nil, 0, err
		}
		if p, ok := at[n]; ok {
			if p.weight == "" {
				continue // a part of a stack written whole
			}
			t, sn := ws[p.weight], q.ScaleName(p.weight)
			s, ok := ws[sn]
			if !ok || t.DType != q.DType() {
				return nil, 0, fmt.Errorf("weight %s is loaded as %s without scales %s of %s", p.weight, t.DType, sn, q)
			}
			if ssn := q.ScaleName(p.stored); ck.Has(ssn) {
				return nil, 0, fmt.Errorf("tensor %s: the name of the scales of %s is taken", ssn, p.stored)
			} else if p.stored != n && ck.Has(p.stored) {
				return nil, 0, fmt.Errorf("tensor %s: the name of the stack of %s is taken", p.stored, n)
			}
			out = append(out, weights.NamedTensor{Name: p.stored, DType: t.DType, Shape: t.Shape, Data: t.Data},
				weights.NamedTensor{Name: q.ScaleName(p.stored), DType: s.DType, Shape: s.Shape, Data: s.Data})
			written[p.weight], written[sn] = true, true
			quantized++
			continue
		}
		data, err := ck.Bytes(n)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, weights.NamedTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: data})
	}
	// The loader quantizes the tensors of the names it declares; one it
	// reads under another name would be lost here: refuse it.
	for _, n := range slices.Sorted(maps.Keys(ws)) {
		if ws[n].DType.IsQuantized() && !written[n] {
			return nil, 0, fmt.Errorf("weight %s is quantized, but the checkpoint has no tensor of its name", n)
		}
	}
	if quantized == 0 {
		return nil, 0, fmt.Errorf("no tensor to quantize in %s", q)
	}
	return out, quantized, nil
}

// writeQuantConfig writes src's config.json into out with q's
// quantization_config added (numbers kept as written, keys sorted).
func writeQuantConfig(src, out string, q lm.Quant) error {
	raw, err := weights.ReadFileIn(src, "config.json", weights.MaxConfigLen)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(src, "config.json"), err)
	}
	cfg["quantization_config"] = q.Config()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	return os.WriteFile(filepath.Join(out, "config.json"), buf.Bytes(), 0o644)
}

// copySideFiles copies the files of src beside its weights (tokenizer
// files, generation_config.json, a README) into out: every regular file of
// up to maxSideFile bytes but config.json and the safetensors. A folder or
// a larger file is left, with a warning; a link out of src is an error.
func copySideFiles(ctx context.Context, src, out string) ([]string, error) {
	ents, err := os.ReadDir(src)
	if err != nil {
		return nil, err
	}
	var copied []string
	for _, e := range ents {
		n := e.Name()
		if n == "config.json" || n == weights.IndexFile || strings.HasSuffix(n, ".safetensors") {
			continue
		}
		if e.IsDir() {
			logger(ctx).Warn("quantize: not copied: a folder", "name", filepath.Join(src, n))
			continue
		}
		if st, err := os.Stat(filepath.Join(src, n)); err == nil && st.Size() > maxSideFile {
			logger(ctx).Warn("quantize: not copied: larger than the limit", "name", filepath.Join(src, n), "bytes", st.Size(), "limit", maxSideFile)
			continue
		}
		data, err := weights.ReadFileIn(src, n, maxSideFile)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(out, n), data, 0o644); err != nil {
			return nil, err
		}
		copied = append(copied, n)
	}
	return copied, nil
}

// checkOutDir refuses an --out that exists and is not an empty folder.
func checkOutDir(out string) error {
	st, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if !st.IsDir() {
		return usagef("--out %s: exists and is not a folder", out)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if len(ents) > 0 {
		return usagef("--out %s: the folder exists and is not empty (%d entries)", out, len(ents))
	}
	return nil
}

// removeWritten removes what a failed quantize wrote into out (which was
// empty or absent before): its entries, and out itself when it made it.
func removeWritten(out string, created bool) {
	if created {
		os.RemoveAll(out)
		return
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(out, e.Name()))
	}
}

// parseBytes reads a size: bytes, or a number with a unit (kB, MB, GB, TB
// in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024; B), as
// transformers' max_shard_size takes it.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, err
	}
	mult := map[string]float64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}[strings.ToLower(unit)]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	n := v * mult
	if n >= 1<<62 {
		return 0, fmt.Errorf("%s is too large", s)
	}
	return int64(n), nil
}
