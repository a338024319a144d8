package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/weights"
)

// infoConfigKeys are the config.json fields reel info shows, in order, when
// present: the shape every decoder has, then the fields of the
// checkpoint's architecture (models.Arch.InfoFields).
func infoConfigKeys(a models.Arch) []string {
	return append([]string{
		"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
		"num_attention_heads", "num_key_value_heads", "head_dim",
		"max_position_embeddings", "tie_word_embeddings", "torch_dtype", "dtype",
		"rope_theta", "rope_scaling", "rope_parameters", "quantization_config",
	}, a.InfoFields...)
}

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("info", "--model DIR [--tensors]", `
Info summarizes a Hugging Face style checkpoint folder: the model type and
main fields of its config.json, then its tensors: how many, the total number
of parameters and the bytes of each dtype. With --tensors it also lists every
tensor with its dtype and shape.`, stderr)
	dir := fs.String("model", "", "checkpoint folder holding config.json and safetensors (required)")
	tensors := fs.Bool("tensors", false, "list every tensor: name, dtype, shape")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("--model is required")
	}
	return writeInfo(ctx, stdout, *dir, *tensors)
}

// writeInfo writes the summary of the checkpoint in dir.
func writeInfo(ctx context.Context, w io.Writer, dir string, listTensors bool) error {
	log := logger(ctx)
	ck, err := weights.Open(dir)
	if err != nil {
		return fmt.Errorf("info: %w", err)
	}
	defer ck.Close()
	log.Debug("opened checkpoint", "dir", dir, "tensors", len(ck.Names()))
	cfgPath := filepath.Join(dir, "config.json")
	cfg, err := weights.ReadConfig(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		log.Warn("no config.json; showing tensors only", "dir", dir)
		cfg, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("info: %w", err)
	}

	var buf bytes.Buffer // written out whole, so an error leaves no half summary
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "model\t%s\n", dir)
	if cfg != nil {
		if err := writeConfigSummary(tw, cfg); err != nil {
			return fmt.Errorf("info: %w", err)
		}
	} else {
		fmt.Fprintf(tw, "config\tnone (no config.json)\n")
	}
	sum := ck.Summary()
	fmt.Fprintf(tw, "tensors\t%d\n", sum.Tensors)
	fmt.Fprintf(tw, "parameters\t%d (%s)\n", sum.Params, humanCount(sum.Params))
	var total int64
	for _, b := range sum.Bytes {
		total += b
	}
	fmt.Fprintf(tw, "bytes\t%d (%s)\n", total, humanBytes(total))
	for _, dt := range slices.Sorted(maps.Keys(sum.Bytes)) {
		fmt.Fprintf(tw, "  %s\t%d (%s)\n", dt, sum.Bytes[dt], humanBytes(sum.Bytes[dt]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if listTensors {
		names := ck.Names()
		slices.SortFunc(names, naturalCompare)
		fmt.Fprintf(&buf, "\n")
		tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "tensor\tdtype\tshape\n")
		for _, name := range names {
			info, err := ck.Info(name)
			if err != nil {
				return fmt.Errorf("info: %w", err)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", name, info.DType, graph.Shape(info.Shape))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// writeConfigSummary writes the model type, architectures and the fields of
// infoConfigKeys that the config has.
func writeConfigSummary(w io.Writer, cfg *weights.Config) error {
	g := cfg.Get()
	typ := g.String("model_type", "")
	var archs []string
	if cfg.Has("architectures") {
		archs = g.Strings("architectures")
	}
	if err := g.Err(); err != nil {
		return err
	}
	if typ == "" {
		typ = "(none)"
	}
	fmt.Fprintf(w, "model_type\t%s\n", typ)
	if len(archs) > 0 {
		fmt.Fprintf(w, "architectures\t%s\n", strings.Join(archs, ", "))
	}
	a, ok := models.Lookup(typ, archs...)
	if ok {
		fmt.Fprintf(w, "runs as\t%s\n", a.Name)
	} else {
		fmt.Fprintf(w, "runs as\tnothing: Reel has no architecture for it (it knows %s)\n", strings.Join(models.ModelTypes(), ", "))
	}
	fmt.Fprintf(w, "config\t%s\n", cfg.Path())
	for _, k := range infoConfigKeys(a) {
		if raw := cfg.Raw(k); raw != nil {
			fmt.Fprintf(w, "  %s\t%s\n", k, describeJSON(raw))
		}
	}
	return nil
}

// describeJSON writes a config value on one line: a string as is, compact
// JSON for the rest, a long list
// of strings as counts ("8 items: linear_attention ×6, ..."), other long
// values cut short.
func describeJSON(raw json.RawMessage) string {
	var str string
	if json.Unmarshal(raw, &str) == nil && len(str) <= 72 {
		return str
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil && len(strs) > 4 {
		var order []string
		count := map[string]int{}
		for _, s := range strs {
			if count[s] == 0 {
				order = append(order, s)
			}
			count[s]++
		}
		parts := make([]string, len(order))
		for i, s := range order {
			parts[i] = fmt.Sprintf("%s ×%d", s, count[s])
		}
		return fmt.Sprintf("%d items: %s", len(strs), strings.Join(parts, ", "))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw)
	}
	s := buf.String()
	if len(s) > 72 {
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) == nil {
			return s[:64] + fmt.Sprintf("... (%d items)", len(elems))
		}
		return s[:72] + "..."
	}
	return s
}

// humanCount writes a count with a k/M/G suffix: 1.23M.
func humanCount(n int64) string {
	return scaled(n, 1000, []string{"", "k", "M", "G", "T"})
}

// humanBytes writes a byte count in decimal units: 904 kB, 7.95 GB.
func humanBytes(n int64) string {
	return scaled(n, 1000, []string{" B", " kB", " MB", " GB", " TB"})
}

func scaled(n, unit int64, suffixes []string) string {
	if n < unit {
		return fmt.Sprintf("%d%s", n, suffixes[0])
	}
	v := float64(n)
	i := 0
	for v >= float64(unit) && i < len(suffixes)-1 {
		v /= float64(unit)
		i++
	}
	return fmt.Sprintf("%.3g%s", v, suffixes[i])
}

// naturalCompare orders names with their digit runs compared as numbers, so
// layers.2 comes before layers.10; names equal that way ("01", "1") fall
// back to byte order, so the order is total.
func naturalCompare(a, b string) int {
	return cmp.Or(natural(a, b), strings.Compare(a, b))
}

func natural(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitPrefix(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
