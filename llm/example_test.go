package llm_test

import (
	"context"
	"fmt"
	"strings"

	"agentsociety/llm"
)

// ModelFunc turns a function into a Model, which is enough for a one-off
// stand-in; llm/llmtest has a scripted Model that records its calls. This one
// shouts back the last message, and honours ctx as every Model must.
func ExampleModelFunc() {
	var m llm.Model = llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("echo: %w", err)
		}
		last := req.Messages[len(req.Messages)-1].Content
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: strings.ToUpper(last)}}, nil
	})

	resp, err := m.Generate(context.Background(), &llm.Request{
		Agent:    "agent-1",
		System:   "You repeat what you are told, loudly.",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Message.Role, resp.Message.Content)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = m.Generate(ctx, &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}}})
	fmt.Println(err, llm.IsTransient(err))
	// Output:
	// assistant HELLO
	// echo: context canceled false
}
