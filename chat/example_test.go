package chat_test

import (
	"fmt"
	"log"

	"github.com/reel-runtime/reel/chat"
)

// Render a conversation with a tokenizer folder's template, as a prompt
// that ends where the assistant's answer starts.
func Example() {
	tmpl, err := chat.Load("testdata/qwen3")
	if err != nil {
		log.Fatal(err)
	}
	prompt, err := tmpl.Render([]chat.Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "2+2?"},
	}, chat.RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(prompt)
	// Output:
	// <|im_start|>system
	// You are terse.<|im_end|>
	// <|im_start|>user
	// 2+2?<|im_end|>
	// <|im_start|>assistant
}

// A template given as source, with a special token and an extra variable.
func ExampleNew() {
	tmpl, err := chat.New(`{{ bos_token }}
{%- for m in messages %}
[{{ m.role|upper }}] {{ m.content }}
{% endfor %}
{%- if add_generation_prompt %}[ASSISTANT]{% if brief %} (briefly){% endif %}{% endif %}`,
		map[string]string{"bos_token": "<s>"})
	if err != nil {
		log.Fatal(err)
	}
	prompt, err := tmpl.Render([]chat.Message{{Role: "user", Content: "Hi!"}},
		chat.RenderOptions{AddGenerationPrompt: true, Extra: map[string]any{"brief": true}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", prompt)
	// Output:
	// "<s>[USER] Hi!\n[ASSISTANT] (briefly)"
}
