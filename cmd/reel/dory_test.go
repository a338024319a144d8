package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/reel-runtime/reel/graph"
	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	"github.com/reel-runtime/reel/models/qwen4"
	"github.com/reel-runtime/reel/planner"
)

const doryTiny = "../../testdata/dory/dory-tiny-per_loop"

func TestLogitsPrintsJSONRows(t *testing.T) {
	code, out, errOut := reel("logits", "--model", doryTiny, "--ids", "3,10,17,24", "--chunk", "3", "--want", "all")
	require.Equal(t, exitOK, code, errOut)
	var got logitsOutput
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, []int{0, 1, 2, 3}, got.Positions)
	require.Len(t, got.Logits, 4)
	require.Len(t, got.Logits[0], 97)

	code, out, errOut = reel("logits", "--model", doryTiny, "--ids", "3,10,17,24", "--chunk", "3")
	require.Equal(t, exitOK, code, errOut)
	var last logitsOutput
	require.NoError(t, json.Unmarshal([]byte(out), &last))
	require.Equal(t, []int{3}, last.Positions)
	require.Equal(t, got.Logits[3], last.Logits[0], "the last row is the same in both")
}

func TestLogitsRejectsBadIDs(t *testing.T) {
	code, _, errOut := reel("logits", "--model", doryTiny, "--ids", "3,200")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "id 200 is outside the vocabulary of 97")
	code, _, errOut = reel("logits", "--model", doryTiny, "--ids", "3,x")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `"x" is not an integer id`)
}

func TestCheckPassesAndFails(t *testing.T) {
	code, out, errOut := reel("check", "--golden", "../../testdata/dory")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, 6, strings.Count(out, " ok\n"), out)

	// A golden file with one logit moved by 0.01 must fail that case.
	dir := t.TempDir()
	raw, err := os.ReadFile("../../testdata/dory/golden.json")
	require.NoError(t, err)
	var cases []map[string]any
	require.NoError(t, json.Unmarshal(raw, &cases))
	cases = cases[:1]
	cases[0]["logits_last"].([]any)[5] = cases[0]["logits_last"].([]any)[5].(float64) + 0.01
	raw, err = json.Marshal(cases)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "golden.json"), raw, 0o644))
	abs, err := filepath.Abs("../../testdata/dory/dory-tiny-per_loop")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(abs, filepath.Join(dir, "dory-tiny-per_loop")))
	code, out, errOut = reel("check", "--golden", dir)
	require.Equal(t, exitError, code)
	require.Contains(t, out, "FAIL")
	require.Contains(t, errOut, "past the tolerance")
}

func TestRunGenerates(t *testing.T) {
	code, out, errOut := reel("run", "--tokens", "40", "--seed", "3")
	require.Equal(t, exitOK, code, errOut)
	require.True(t, strings.HasPrefix(out, "package main\n"), out)
	require.Greater(t, len(out), len("package main\n")+30)
	require.Contains(t, errOut, "prefill: 13 tokens")
	require.Contains(t, errOut, "decode:  39 tokens")

	code, _, errOut = reel("run", "--model", doryTiny, "--tokens", "3")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--prompt-ids")
	code, out, errOut = reel("run", "--model", doryTiny, "--prompt-ids", "5,6", "--tokens", "3", "--temperature", "0")
	require.Equal(t, exitOK, code, errOut)
	require.Len(t, strings.Fields(out), 5)
}

func TestDumpDoryStages(t *testing.T) {
	code, out, errOut := reel("dump", "--synthetic", "dory-4b", "--stats")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "nodes 2081, launches 399") // 455 before each qkv_prep went into its attention (session 11)
	for _, stage := range []string{"all", "first", "firstread", "read", "secondread", "secondfresh"} {
		want := "last"
		if stage == "first" {
			want = "none"
		}
		for _, pass := range []string{"graph", "fused", "plan"} {
			code, out, errOut := reel("dump", "--model", "../../testdata/dory-gotiny", "--stage", stage, "--want", want, "--pass", pass, "--format", "json")
			require.Equal(t, exitOK, code, "%s %s: %s", stage, pass, errOut)
			require.True(t, json.Valid([]byte(out)), "%s %s", stage, pass)
		}
	}
	code, _, errOut = reel("dump", "--synthetic", "dory-9b")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "dory-9b")
}

func TestQwen4CheckAndLogits(t *testing.T) {
	code, out, errOut := reel("check", "--golden", "../../testdata/qwen4/qwen4-tiny-small-11")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, 3, strings.Count(out, " ok\n"), out)
	require.Equal(t, 3, strings.Count(out, "incremental"), out)

	code, out, errOut = reel("logits", "--model", "../../testdata/qwen4/qwen4-tiny-wide-21", "--ids", "1,2,3", "--want", "all")
	require.Equal(t, exitOK, code, errOut)
	var got logitsOutput
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, []int{0, 1, 2}, got.Positions)
	code, _, errOut = reel("logits", "--model", "../../testdata/qwen4/qwen4-tiny-wide-21", "--ids", "1,100000")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "100000")
}

func TestDumpQwen4(t *testing.T) {
	code, out, errOut := reel("dump", "--synthetic", "qwen4-12l", "--stats")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "plan qwen4/forward/want=last/rows=1")
	require.Contains(t, out, "launches")
	code, out, errOut = reel("dump", "--synthetic", "qwen4-12l", "--stage", "draft", "--pass", "fused")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "mtp")

	code, out, errOut = reel("dump", "--model", "../../testdata/qwen4/qwen4-tiny-small-11", "--rows", "2", "--pass", "plan", "--format", "json")
	require.Equal(t, exitOK, code, errOut)
	require.True(t, json.Valid([]byte(out)))
	code, _, errOut = reel("dump", "--model", "../../testdata/qwen4/qwen4-tiny-small-11", "--stage", "firstread")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "forward, draft and settle")
	code, out, errOut = reel("dump", "--model", "../../testdata/qwen4/qwen4-tiny-small-11", "--stage", "settle", "--rows", "3", "--stats")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "plan qwen4/settle/want=none/rows=3/of=3")
	require.Contains(t, out, "0 outputs")
}

func TestOpsListsEveryOp(t *testing.T) {
	code, out, errOut := reel("ops")
	require.Equal(t, exitOK, code, errOut)
	for _, name := range []string{"matmul", "slerp", "qkv_prep", "moe_route", "gdn_scan"} {
		require.Contains(t, out, "\n"+name+" ", name)
	}
	code, out, _ = reel("ops", "--op", "rope")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "NeoX half split")
	code, _, errOut = reel("ops", "--op", "nope")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `unknown op "nope"`)
}

func TestBenchQwen4(t *testing.T) {
	code, out, errOut := reel("bench", "--model", "../../testdata/qwen4/qwen4-tiny-small-11", "--prompt", "9", "--tokens", "5")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "(qwen4, ")
	require.Contains(t, out, "decode       5 tokens")
	// the warm prompt and the five tokens replay plans (the first prompt and the
	// warm-up token record them)
	require.Contains(t, out, "plans 2, records 2, updates 0, hits 6")
}

// TestRunQwen4: greedy generation on a Qwen4-Exp checkpoint prints the
// prompt and the tokens, each the argmax of reel logits over what came
// before; --draft needs greedy decoding and an MTP head.
func TestRunQwen4(t *testing.T) {
	const model = "../../testdata/qwen4/qwen4-tiny-small-11"
	code, out, errOut := reel("run", "--model", model, "--prompt-ids", "1,2,3", "--tokens", "4", "--temperature", "0")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, errOut, "decode:  3 tokens")
	var ids []int
	for _, f := range strings.Fields(out) {
		id, err := strconv.Atoi(f)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.Len(t, ids, 7)
	require.Equal(t, []int{1, 2, 3}, ids[:3])
	for p := 3; p < len(ids); p++ {
		var prefix []string
		for _, id := range ids[:p] {
			prefix = append(prefix, strconv.Itoa(id))
		}
		code, out, errOut := reel("logits", "--model", model, "--ids", strings.Join(prefix, ","))
		require.Equal(t, exitOK, code, errOut)
		var got logitsOutput
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		best := 0
		for i, v := range got.Logits[0] {
			if v > got.Logits[0][best] {
				best = i
			}
		}
		require.Equal(t, best, ids[p], "token %d", p)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tokens", "2"}, "--prompt-ids"},
		{[]string{"--prompt-ids", "1", "--draft", "-1"}, "negative"},
		{[]string{"--prompt-ids", "1", "--draft", "2", "--temperature", "0"}, "no draft head"},
		{[]string{"--prompt-ids", "1", "--draft", "4", "--temperature", "0", "--chunk", "4"}, "more than a chunk of 4"},
	} {
		code, _, errOut := reel(append([]string{"run", "--model", model}, tc.args...)...)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, tc.want)
	}
}

// TestWeightBytesReadMoE: a decode token of a MoE reads its k experts, not
// all of them, and the n-gram tables' rows it looks up.
func TestWeightBytesReadMoE(t *testing.T) {
	m, err := qwen4.Load("../../testdata/qwen4/qwen4-tiny-small-11")
	require.NoError(t, err)
	defer m.Close()
	c := m.Config
	g, err := qwen4.Build(&c, qwen4.Key{Stage: qwen4.Forward, Want: lm.WantLast, Rows: 1}, m)
	require.NoError(t, err)
	p, _, err := planner.Plan(g, planner.Options{Fuse: true})
	require.NoError(t, err)
	got := weightBytesRead(p)
	dense, experts, lookups := 0, 0, 0
	for _, v := range g.Values {
		switch {
		case v.Kind != graph.Weight:
		case len(v.Shape) == 3 && v.Shape[0] == c.Experts:
			experts += v.Bytes()
		case v.Name == "model.embed_tokens.weight" || strings.Contains(v.Name, "ngram_embedding"):
			lookups += v.Bytes()
		default:
			dense += v.Bytes()
		}
	}
	require.Positive(t, experts)
	// every dense weight whole, k of the E experts, a row of each table
	require.GreaterOrEqual(t, got, dense+experts*c.TopK/c.Experts)
	require.Less(t, got, dense+experts*c.TopK/c.Experts+lookups/10)
}

// TestRunDraftTinyMTP: on the tiny checkpoint with an MTP head, greedy
// decoding with drafts gives the very tokens of plain decoding.
func TestRunDraftTinyMTP(t *testing.T) {
	const model = "../../testdata/qwen4/qwen4-tiny-mtp"
	args := []string{"run", "--model", model, "--prompt-ids", "1,2,3", "--temperature", "0", "--tokens", "24"}
	code, plain, errOut := reel(args...)
	require.Equal(t, exitOK, code, errOut)
	for _, n := range []string{"1", "2", "3"} {
		code, drafted, errOut := reel(append(args, "--draft", n)...)
		require.Equal(t, exitOK, code, errOut)
		require.Equal(t, plain, drafted, "--draft %s", n)
		require.Contains(t, errOut, "drafts:")
	}
	require.Len(t, strings.Fields(plain), 3+24)
}

// TestProductFLOPsFused: a prompt chunk's product work is the same whether
// the planner fuses the products (grouped, with SwiGLU, with the norm and
// the down product after it, with the slerp before them) or not, for each
// synthetic shape, in bf16 and quantized (Dory's the same in each).
func TestProductFLOPsFused(t *testing.T) {
	var bf16 float64
	for _, name := range []string{"dory-4b", "dory-4b/q4", "dory-4b/fp8", "qwen4-12l", "qwen4-12l/q4"} {
		arch, q, _ := strings.Cut(name, "/")
		a, ok := models.Synthetic(arch)
		require.True(t, ok, name)
		m, err := a.Shapes[arch]()
		require.NoError(t, err)
		if q != "" {
			m, err = models.Quantize(m, q, nil)
			require.NoError(t, err)
		}
		g, err := m.Graph(m.Stages()[0], 64, lm.WantLast, models.Options{Params: map[string]string{}})
		require.NoError(t, err)
		fused, _, err := planner.Plan(g, planner.Options{Fuse: true})
		require.NoError(t, err)
		plain, _, err := planner.Plan(g, planner.Options{})
		require.NoError(t, err)
		require.Positive(t, productFLOPs(plain), name)
		require.InEpsilon(t, productFLOPs(plain), productFLOPs(fused), 1e-12, name)
		switch name {
		case "dory-4b":
			bf16 = productFLOPs(fused)
		case "dory-4b/q4", "dory-4b/fp8":
			require.InEpsilon(t, bf16, productFLOPs(fused), 1e-12, name) // the same products, stored otherwise
		}
		require.NoError(t, m.Close())
	}
}

// TestBenchAblate: --ablate costs every op of the decode plan and of the
// last prompt chunk's plan, each with its launches as the plan has them.
func TestBenchAblate(t *testing.T) {
	code, out, errOut := reel("bench", "--model", "../../testdata/qwen4/qwen4-tiny-small-11", "--prompt", "9", "--tokens", "2", "--ablate")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "ablation     one decode token: a replay takes")
	require.Contains(t, out, "ablation     the last prompt chunk (9 rows): a replay takes")
	launches := regexp.MustCompile(`decode plan  (\d+) launches per token`).FindStringSubmatch(out)
	require.NotNil(t, launches, out)
	decode := out[strings.Index(out, "ablation     one decode token"):strings.Index(out, "ablation     the last prompt chunk")]
	sum := 0
	for _, m := range regexp.MustCompile(`(?m)^  \S+ +(\d+) launches`).FindAllStringSubmatch(decode, -1) {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		sum += n
	}
	require.Equal(t, launches[1], strconv.Itoa(sum), "the ablated ops' launches are the decode plan's")
	require.Contains(t, decode, "the ops' costs add up to")
}
