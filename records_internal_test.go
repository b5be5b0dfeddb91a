package agentsociety

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"agentsociety/llm"
	"agentsociety/store"

	"pgregory.net/rapid"
)

// encodeMessagesByReflection is what encodeMessages wrote before it wrote
// without reflection: each message's savedMessage through json.Encoder,
// without escaping HTML.
func encodeMessagesByReflection(msgs []llm.Message) []json.RawMessage {
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		saved := savedMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			saved.ToolCalls = append(saved.ToolCalls, savedCall{c.ID, c.Name, string(c.Arguments)})
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(saved); err != nil {
			panic(err)
		}
		out[i] = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	return out
}

// TestEncodeMessagesIsJSON: encodeMessages writes, byte for byte, what
// json.Encoder writes of each message's savedMessage, for any text (every
// character JSON escapes, HTML's, the line separators and invalid UTF-8
// among them), and restoreMind reads the messages back.
func TestEncodeMessagesIsJSON(t *testing.T) {
	parts := []string{"a", "Z", " ", "\"", "\\", "/", "<", ">", "&", "\x00", "\b", "\f", "\n", "\r", "\t", "\x1f", "\x7f",
		"é", "来", "😀", "\u2028", "\u2029", "\u0085", "\xc2", "\xe2\x80", "\xff", `{"a":1}`, "\ufffd"}
	text := rapid.Custom(func(t *rapid.T) string {
		return strings.Join(rapid.SliceOf(rapid.SampledFrom(parts)).Draw(t, "parts"), "")
	})
	rapid.Check(t, func(t *rapid.T) {
		var msgs []llm.Message
		for range rapid.IntRange(0, 4).Draw(t, "messages") {
			m := llm.Message{
				Role:       rapid.SampledFrom([]llm.Role{llm.RoleUser, llm.RoleAssistant, llm.RoleTool, ""}).Draw(t, "role"),
				Content:    text.Draw(t, "content"),
				ToolCallID: rapid.SampledFrom([]string{"", "call_1"}).Draw(t, "tool_call_id"),
			}
			switch rapid.IntRange(0, 2).Draw(t, "calls") {
			case 1:
				m.ToolCalls = []llm.ToolCall{}
			case 2:
				for range rapid.IntRange(1, 3).Draw(t, "n") {
					m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: text.Draw(t, "id"), Name: text.Draw(t, "name"), Arguments: json.RawMessage(text.Draw(t, "arguments"))})
				}
			}
			msgs = append(msgs, m)
		}
		got, want := encodeMessages(msgs), encodeMessagesByReflection(msgs)
		if len(got) != len(want) {
			t.Fatalf("%d messages encoded, want %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("message %d:\n got %s\nwant %s", i, got[i], want[i])
			}
		}
		if _, err := restoreMind(store.History{Messages: got}); err != nil {
			t.Fatal(err)
		}
	})
}
