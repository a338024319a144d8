package sample_test

import (
	"fmt"
	"strings"

	"github.com/reel-runtime/reel/sample"
)

func ExampleSampler() {
	s, err := sample.NewSampler(sample.Options{
		Temperature:       0.7,
		TopK:              3,
		TopP:              0.9,
		RepetitionPenalty: 1.3,
		Seed:              1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Prompt([]int{0}) // the repetition penalty counts the prompt
	// Token 0's logit becomes 2/1.3 = 1.54; top-k keeps 1, 0 and 2 with
	// probabilities 0.54, 0.37 and 0.08; top-p 0.9 then drops token 2.
	logits := []float32{2.0, 1.8, 0.5, -1, 0.2}
	ids, probs := s.Probs(logits) // what Next draws from
	for i, id := range ids {
		fmt.Printf("token %d: %.3f\n", id, probs[i])
	}
	fmt.Println("drawn:", s.Next(logits))
	// Output:
	// token 0: 0.408
	// token 1: 0.592
	// drawn: 0
}

func ExampleStopper() {
	st, err := sample.NewStopper(sample.StopOptions{
		EOS:       []int{2},
		Strings:   []string{"\nUser:"},
		MaxTokens: 100,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// the tokens a model generated, and their text
	ids := []int{10, 11, 12, 13, 14, 2}
	pieces := []string{"Hello", " there.", "\n", "User", ": hi", ""}
	var out strings.Builder
	for i, id := range ids {
		show, stop := st.Push(id, pieces[i])
		out.WriteString(show) // print as it comes
		if stop {
			break
		}
	}
	fmt.Printf("%q, stopped by %s %q after %d tokens\n", out.String(), st.Reason(), st.Match(), st.Tokens())
	// Output:
	// "Hello there.", stopped by stop string "\nUser:" after 5 tokens
}

func ExampleResolve() {
	// generation_config.json's settings (weights.LoadGenerationConfig(dir).Sampling())
	f := func(v float64) *float64 { return &v }
	doSample := true
	file := sample.Params{DoSample: &doSample, Temperature: f(0.6), TopP: f(0.95)}
	// the user's flags: only those given are set
	user := sample.Params{Temperature: f(0.9)}
	o, err := sample.Resolve(sample.Options{Temperature: 1, Seed: 1}, file, user)
	fmt.Printf("%+v %v\n", o, err)
	// Output:
	// {Temperature:0.9 TopK:0 TopP:0.95 MinP:0 RepetitionPenalty:0 PresencePenalty:0 FrequencyPenalty:0 Seed:1} <nil>
}
