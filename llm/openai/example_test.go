package openai_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"agentsociety/llm"
	"agentsociety/llm/openai"
)

// This example points the adapter at a local OpenAI-compatible server. A
// stand-in server answers here so that the example runs offline; with a
// real one (vLLM, llama.cpp, Ollama, ...) only BaseURL and Model change.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "llama-3.1-8b",
			"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
				"role": "assistant", "content": "Let me tell Bob.",
				"tool_calls": [{"id": "call_1", "type": "function",
					"function": {"name": "send", "arguments": "{\"to\":\"bob\",\"text\":\"hi\"}"}}]}}],
			"usage": {"prompt_tokens": 42, "completion_tokens": 12, "total_tokens": 54}
		}`)
	}))
	defer srv.Close()

	model, err := openai.New(openai.Config{
		BaseURL: srv.URL + "/v1",
		APIKey:  "sk-local", // a local server may need none
		Model:   "llama-3.1-8b",
	})
	if err != nil {
		log.Fatal(err)
	}

	resp, err := model.Generate(context.Background(), &llm.Request{
		Agent:    "alice",
		System:   "You are Alice. Use the send tool to talk to others.",
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "Say hi to Bob."}},
		Tools: []llm.Tool{{
			Name:        "send",
			Description: "Send a message to another agent.",
			Parameters:  []byte(`{"type":"object","properties":{"to":{"type":"string"},"text":{"type":"string"}},"required":["to","text"]}`),
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Message.Content)
	for _, call := range resp.Message.ToolCalls {
		fmt.Printf("%s %s(%s)\n", call.ID, call.Name, call.Arguments)
	}
	fmt.Printf("tokens: %d in, %d out\n", resp.Usage.InputTokens, resp.Usage.OutputTokens)
	// Output:
	// Let me tell Bob.
	// call_1 send({"to":"bob","text":"hi"})
	// tokens: 42 in, 12 out
}
