package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func dumpCmd(ctx context.Context, args []string, out, errOut *bytes.Buffer) error {
	return runDump(ctx, args, out, errOut)
}

func TestDumpFormats(t *testing.T) {
	for _, ex := range exampleNames() {
		for _, format := range dumpFormatNames() {
			t.Run(ex+"/"+format, func(t *testing.T) {
				out, err := runCmd(t, dumpCmd, "--example", ex, "--format", format)
				if err != nil {
					t.Fatal(err)
				}
				again, _ := runCmd(t, dumpCmd, "--example", ex, "--format", format)
				if out != again {
					t.Error("two dumps of one example differ")
				}
				switch format {
				case "text":
					if !strings.HasPrefix(out, "graph example "+ex+":") || !strings.Contains(out, "  outputs: %") {
						t.Errorf("not a text dump:\n%s", out)
					}
				case "dot":
					if !strings.HasPrefix(out, `digraph "example `+ex+`" {`) || !strings.HasSuffix(out, "}\n") {
						t.Errorf("not a DOT dump:\n%s", out)
					}
				case "json":
					var j struct {
						Name  string `json:"name"`
						Nodes []struct {
							Op    string `json:"op"`
							Scope string `json:"scope"`
						} `json:"nodes"`
						Outputs []int `json:"outputs"`
					}
					if err := json.Unmarshal([]byte(out), &j); err != nil {
						t.Fatalf("JSON dump does not parse: %v", err)
					}
					if j.Name != "example "+ex || len(j.Nodes) == 0 || len(j.Outputs) != 1 {
						t.Errorf("JSON dump: name %q, %d nodes, outputs %v", j.Name, len(j.Nodes), j.Outputs)
					}
				}
			})
		}
	}
}

// TestDumpDefaultIsAttention checks the default example holds the whole
// attention sub-layer.
func TestDumpDefaultIsAttention(t *testing.T) {
	out, err := runCmd(t, dumpCmd, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Name  string `json:"name"`
		Nodes []struct {
			Op     string `json:"op"`
			Scope  string `json:"scope"`
			Writes []int  `json:"writes"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	writes := 0
	for _, n := range j.Nodes {
		count[n.Op]++
		writes += len(n.Writes)
		if !strings.HasPrefix(n.Scope, "layer 0 / ") {
			t.Errorf("node %s has scope %q", n.Op, n.Scope)
		}
	}
	want := map[string]int{"matmul": 5, "rope": 2, "kv_write": 2, "attention": 1, "sigmoid": 1}
	for op, n := range want {
		if count[op] != n {
			t.Errorf("%d %s nodes, want %d (all: %v)", count[op], op, n, count)
		}
	}
	if j.Name != "example attention" || writes != 2 || count["l2norm"] < 5 {
		t.Errorf("name %q, %d state writes, %d l2norms", j.Name, writes, count["l2norm"])
	}
}

func TestDumpErrors(t *testing.T) {
	var ue *usageError
	for _, args := range [][]string{
		{"--format", "svg"},
		{"--example", "nope"},
		{"positional"},
	} {
		if _, err := runCmd(t, dumpCmd, args...); !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if names := dumpFormatNames(); !slices.Equal(names, []string{"text", "dot", "json"}) {
		t.Errorf("formats %v", names)
	}
}
