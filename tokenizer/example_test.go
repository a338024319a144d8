package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/reel-runtime/reel/tokenizer"
)

// Load a model folder's tokenizer, encode text and decode it back.
func Example() {
	tok, err := tokenizer.Load("testdata/qwen3") // tokenizer.json (here .gz) and tokenizer_config.json
	if err != nil {
		log.Fatal(err)
	}
	ids, err := tok.Encode("Hello, world!", false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids)
	text, err := tok.Decode(ids, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(text)
	// A model with fewer embedding rows than the tokenizer has ids is an error.
	fmt.Println(tok.CheckVocab(151936) == nil, tok.CheckVocab(150000) != nil)
	// Output:
	// [9707 11 1879 0]
	// Hello, world!
	// true true
}

// Decode generated ids one at a time: " 🦩" is three byte-level tokens;
// the space comes out with the first, the flamingo with the last.
func ExampleStream() {
	tok, err := tokenizer.Load("testdata/qwen3")
	if err != nil {
		log.Fatal(err)
	}
	ids, err := tok.Encode("a 🦩!", false)
	if err != nil {
		log.Fatal(err)
	}
	s := tok.NewStream(false)
	for _, id := range ids {
		text, err := s.Next(id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %q\n", id, text)
	}
	rest, err := s.Flush()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("flush %q\n", rest)
	// Output:
	// 64 "a"
	// 11162 " "
	// 99 ""
	// 102 "🦩"
	// 0 "!"
	// flush ""
}
