package llmtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// A two-step script: a researcher first calls the search tool, then answers
// once the search result comes back. The rule for the second step comes
// first, because the tool result also contains "capital" and the first
// matching rule wins.
func ExampleNew() {
	m := llmtest.New(
		llmtest.Rule{Name: "answer", AfterTool: "search", Response: llmtest.Say("Paris.")},
		llmtest.Rule{Name: "search", SystemContains: "researcher", LastContains: "capital",
			Response: llmtest.Call("search", map[string]string{"query": "capital of France"})},
	)
	ctx := context.Background()

	req := &llm.Request{
		Agent:    "agent-2",
		System:   "You are a researcher.",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "What is the capital of France?"}},
	}
	resp, err := m.Generate(ctx, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	call := resp.Message.ToolCalls[0]
	fmt.Println(call.ID, call.Name, string(call.Arguments))

	// The caller runs the tool and sends its result back.
	req.Messages = append(req.Messages, resp.Message,
		llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: "Paris is the capital of France."})
	resp, err = m.Generate(ctx, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s (estimated usage: %d tokens in, %d out)\n", resp.Message.Content, resp.Usage.InputTokens, resp.Usage.OutputTokens)

	// A third call is not in the script.
	req.Messages = append(req.Messages, resp.Message,
		llm.Message{Role: llm.RoleUser, Content: "And of Italy?"})
	_, err = m.Generate(ctx, req)
	fmt.Println(errors.Is(err, llmtest.ErrNoRule))
	fmt.Println(err)
	// Output:
	// call_1 search {"query":"capital of France"}
	// Paris. (estimated usage: 29 tokens in, 1 out)
	// true
	// llmtest: no rule matches the request: agent "agent-2", last message (user) "And of Italy?"
}

// Rules that match on the system prompt script every agent of a role, and
// RequestsFor shows what one agent was given among the calls of many.
func ExampleModel_RequestsFor() {
	m := llmtest.New(
		llmtest.Rule{SystemContains: "role: developer", Response: llmtest.Say("Page written.")},
		llmtest.Rule{SystemContains: "role: tester", Response: llmtest.Say("All tests pass.")},
	)
	ctx := context.Background()
	for _, r := range []*llm.Request{
		{Agent: "agent-3", System: "role: developer", Messages: []llm.Message{{Role: llm.RoleUser, Content: "Write the page."}}},
		{Agent: "agent-4", System: "role: tester", Messages: []llm.Message{{Role: llm.RoleUser, Content: "Test the page."}}},
		{Agent: "agent-3", System: "role: developer", Messages: []llm.Message{{Role: llm.RoleUser, Content: "Fix the button."}}},
	} {
		resp, err := m.Generate(ctx, r)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %s\n", r.Agent, resp.Message.Content)
	}

	fmt.Println(m.Calls(), "calls; agent-3 was told:")
	for _, r := range m.RequestsFor("agent-3") {
		fmt.Printf("  %s\n", r.Messages[len(r.Messages)-1].Content)
	}
	// Output:
	// agent-3: Page written.
	// agent-4: All tests pass.
	// agent-3: Page written.
	// 3 calls; agent-3 was told:
	//   Write the page.
	//   Fix the button.
}

// FailNext tests a caller's retries: the failures come before any rule, and
// a transient one is worth retrying.
func ExampleModel_FailNext() {
	m := llmtest.New(llmtest.Rule{Response: llmtest.Say("done")})
	m.FailNext(2, llm.ErrRateLimited)

	req := &llm.Request{Agent: "agent-1"}
	for attempt := 1; ; attempt++ {
		resp, err := m.Generate(context.Background(), req)
		if err != nil {
			fmt.Printf("attempt %d: %v (retry: %t)\n", attempt, err, llm.IsTransient(err))
			continue
		}
		fmt.Printf("attempt %d: %s\n", attempt, resp.Message.Content)
		break
	}
	// Output:
	// attempt 1: llmtest: FailNext: llm: rate limited (retry: true)
	// attempt 2: llmtest: FailNext: llm: rate limited (retry: true)
	// attempt 3: done
}

// A personality wraps a competent model and makes one mistake real models
// make. Here the competent script reports to its parent with send_message,
// and the Prose personality writes the report as text instead, which
// reaches nobody.
func ExampleProse() {
	competent := llmtest.New(llmtest.Rule{
		Response: llmtest.Call("send_message", map[string]any{"to": "agent-1", "payload": map[string]string{"text": "done: artifact:a-1"}}),
	})
	m := llmtest.Prose(competent)
	resp, err := m.Generate(context.Background(), &llm.Request{
		Agent:    "agent-2",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "Translate artifact:a-0 and report."}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d tool calls, text %q\n", len(resp.Message.ToolCalls), resp.Message.Content)
	// Output:
	// 0 tool calls, text "To agent-1: done: artifact:a-1"
}

// Mix puts a misbehaving model into some agents of a society only: here
// agents whose system prompt names the role "worker" acknowledge every
// message, and the others follow the script.
func ExampleMix() {
	competent := llmtest.New(llmtest.Rule{Response: llmtest.Say("noted")})
	m := llmtest.Mix(competent, llmtest.Acknowledges(competent), func(req *llm.Request) bool {
		return strings.Contains(req.System, "worker")
	})
	delivered := []llm.Message{{Role: llm.RoleUser, Content: "Status: done.\nTo reply, use send_message(to='agent-1', ...)"}}
	for _, system := range []string{"You are a lead.", "You are a worker."} {
		resp, err := m.Generate(context.Background(), &llm.Request{Agent: "agent-2", System: system, Messages: delivered})
		if err != nil {
			fmt.Println(err)
			return
		}
		if c := resp.Message.ToolCalls; len(c) > 0 {
			fmt.Printf("%s %s %s\n", system, c[0].Name, c[0].Arguments)
		} else {
			fmt.Printf("%s %s\n", system, resp.Message.Content)
		}
	}
	// Output:
	// You are a lead. noted
	// You are a worker. send_message {"payload":{"text":"收到，谢谢！"},"to":"agent-1"}
}

// Personalities lists every personality, for a suite that runs each.
func ExamplePersonalities() {
	for _, p := range llmtest.Personalities() {
		fmt.Printf("%s: %s\n", p.Name, p.Does)
	}
	// Output:
	// spawns-silently: ends its turn without a word as soon as a spawn succeeds, the rest of the turn undone
	// polls: never sets end_turn, and polls (get_artifact, "any progress?") three times before ending its turn
	// acknowledges: acknowledges every message and answers every status report
	// prose: answers in prose instead of calling send_message, the final answer included
	// wrong-keys: uses wrong argument keys and casing, and passes a brief as a JSON string
	// pastes: pastes a 50 KB document into its messages instead of an artifact
	// invents-ids: invents agent ids and request ids
	// truncates: stops mid-answer (finish_reason: length) on every third reply
}
