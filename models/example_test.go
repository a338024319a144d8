package models_test

import (
	"fmt"
	"slices"

	"github.com/reel-runtime/reel/lm"
	"github.com/reel-runtime/reel/models"
	_ "github.com/reel-runtime/reel/models/all" // every architecture
)

// Example loads a checkpoint by its config's model_type (here the tiny
// Dory that writes Go, whose tokens are bytes), starts a session on the
// CPU and decodes greedily: the prompt in one forward, then a token at a
// time, each fed back at the next position. The output is the start of
// the greedy ids an independent PyTorch Dory gave
// (testdata/dory-gotiny/greedy.json).
func Example() {
	m, err := models.Load("../testdata/dory-gotiny")
	if err != nil {
		panic(err)
	}
	defer m.Close()
	s, err := m.NewSession(models.Options{}) // nil Backend: the CPU
	if err != nil {
		panic(err)
	}
	defer s.Close()

	prompt := "package main\n\nimport (\n\t\"fmt\"\n"
	var ids []int
	for _, c := range []byte(prompt) {
		ids = append(ids, int(c))
	}
	logits, err := s.Forward(ids, 0, lm.WantLast) // [1, vocab]
	if err != nil {
		panic(err)
	}
	var out []byte
	for range 20 {
		row := logits.Data().([]float32)
		next := slices.Index(row, slices.Max(row)) // greedy
		out = append(out, byte(next))
		if logits, err = s.Forward([]int{next}, s.Pos(), lm.WantLast); err != nil {
			panic(err)
		}
	}
	fmt.Printf("%s parameters: %d\n%q\n", m.Arch(), m.Parameters(), out)
	// Output:
	// dory parameters: 6967552
	// "\t\"internal/goarch\"\n\t"
}

// ExampleLoadQuantized loads the tiny Dory with its projections quantized
// at load in q4 (4.5 bits a weight; the embedding, the head and the norms
// as stored) and counts the bytes of its weights as a session holds them.
func ExampleLoadQuantized() {
	for _, quant := range []string{"", "q4"} {
		m, err := models.LoadQuantized("../testdata/dory-gotiny", quant)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%q: %d parameters in %d bytes\n", quant, m.Parameters(), m.(models.Weighted).Weights().Bytes(nil))
		m.Close()
	}
	// Output:
	// "": 6967552 parameters in 13976576 bytes
	// "q4": 6967552 parameters in 4178944 bytes
}
