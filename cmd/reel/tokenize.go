package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/reel-runtime/reel/tokenizer"
)

func runTokenize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return tokenize(ctx, args, os.Stdin, stdout, stderr)
}

// tokenize is reel tokenize reading its input from stdin.
func tokenize(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "--tokenizer DIR [--special] [--json] < text\n       reel tokenize --tokenizer DIR --decode [--skip-special] < ids", `
Tokenize encodes the text on stdin with a model folder's tokenizer.json (or
tokenizer.json.gz) as Hugging Face tokenizers does, and prints one line per
token: its id and its piece, the vocabulary string, quoted. --json prints
{"ids": [...]} instead. --special adds the special tokens of the tokenizer's
post-processor (such as a BOS).

With --decode it reads token ids from stdin, separated by commas or
whitespace, and prints their text as it is, with no newline added.`, stderr)
	dir := fs.String("tokenizer", "", "model folder holding tokenizer.json, or the file itself (required)")
	special := fs.Bool("special", false, "add the post-processor's special tokens when encoding")
	asJSON := fs.Bool("json", false, `print {"ids": [...]} instead of "id<TAB>piece" lines`)
	decodeIDs := fs.Bool("decode", false, "read token ids and print their text")
	skipSpecial := fs.Bool("skip-special", false, "with --decode, leave special tokens out")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return usagef("--tokenizer is required")
	case *decodeIDs && (*special || *asJSON):
		return usagef("--special and --json are for encoding, not --decode")
	case *skipSpecial && !*decodeIDs:
		return usagef("--skip-special needs --decode")
	}
	log := logger(ctx)
	tok, err := loadTokenizer(*dir)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	log.Debug("loaded tokenizer", "path", *dir, "ids", tok.VocabSize())
	input, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("tokenize: reading stdin: %w", err)
	}
	if *decodeIDs {
		ids, err := parseIDs(string(input))
		if err != nil {
			return fmt.Errorf("tokenize: stdin: %w", err)
		}
		text, err := tok.Decode(ids, *skipSpecial)
		if err != nil {
			return fmt.Errorf("tokenize: %w", err)
		}
		_, err = io.WriteString(stdout, text)
		return err
	}
	ids, err := tok.Encode(string(input), *special)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	log.Debug("encoded", "bytes", len(input), "tokens", len(ids))
	w := bufio.NewWriter(stdout)
	if *asJSON {
		if ids == nil {
			ids = []int{}
		}
		if err := json.NewEncoder(w).Encode(map[string][]int{"ids": ids}); err != nil {
			return err
		}
	} else {
		for _, id := range ids {
			piece, _ := tok.Token(id)
			fmt.Fprintf(w, "%d\t%s\n", id, strconv.Quote(piece))
		}
	}
	return w.Flush()
}

// loadTokenizer loads a model folder's tokenizer, or a tokenizer.json file.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return tokenizer.Load(path)
	}
	return tokenizer.LoadFile(path)
}
