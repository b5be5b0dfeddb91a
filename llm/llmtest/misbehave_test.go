package llmtest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// A turn as the society runs one: the delivered message, then model calls
// whose tool calls the tools function answers, until a reply has none, a
// reply's calls all succeed with one of them setting end_turn, or maxSteps
// replies were made.

const maxSteps = 10

// fromAgent is a delivered message from agent-2 with its reply hint.
const fromAgent = "【来自 worker（agent-2）的消息】\n完成了：artifact:a-1\nmessage_type: status_report\n如需回复，请使用 send_message(to='agent-2', ...)"

// ok answers every call with a success.
func ok(c llm.ToolCall) string {
	switch c.Name {
	case "spawn_agent":
		return `{"agentId":"agent-3"}`
	case "put_artifact":
		return `{"ref":"artifact:a-9"}`
	}
	return `{"status":"sent"}`
}

// strict refuses the arguments a competent model would not write: keys
// other than to, message_type, payload, roleId and taskBrief, a taskBrief
// that is not an object, and agents other than agent-2, user and agent-3.
func strict(c llm.ToolCall) string {
	var args map[string]json.RawMessage
	if json.Unmarshal(c.Arguments, &args) != nil {
		return `{"error":"invalid_argument","message":"not JSON"}`
	}
	for k, v := range args {
		switch k {
		case "to":
			var to string
			json.Unmarshal(v, &to)
			if to != "agent-2" && to != "user" && to != "agent-3" {
				return `{"error":"agent_not_found","message":"no agent"}`
			}
		case "message_type", "payload", "roleId", "end_turn":
		case "taskBrief":
			if !strings.HasPrefix(string(v), "{") {
				return `{"error":"invalid_argument","message":"taskBrief must be an object"}`
			}
		default:
			return `{"error":"invalid_argument","message":"unknown key ` + k + `"}`
		}
	}
	return ok(c)
}

// turn runs one turn of agent-1 on m, opened by delivered, and returns the
// conversation and the last reply.
func turn(t *testing.T, m llm.Model, delivered string, tools func(llm.ToolCall) string) ([]llm.Message, *llm.Response) {
	t.Helper()
	msgs := []llm.Message{{Role: llm.RoleUser, Content: delivered}}
	for step := 0; step < maxSteps; step++ {
		resp, err := m.Generate(context.Background(), &llm.Request{Agent: "agent-1", System: "你是 worker", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, resp.Message)
		if len(resp.Message.ToolCalls) == 0 {
			return msgs, resp
		}
		end, failed := false, false
		for _, c := range resp.Message.ToolCalls {
			out := tools(c)
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: out})
			var a struct {
				EndTurn bool `json:"end_turn"`
			}
			end = end || json.Unmarshal(c.Arguments, &a) == nil && a.EndTurn
			failed = failed || strings.Contains(out, `"error"`)
		}
		if end && !failed {
			return msgs, resp
		}
	}
	t.Fatalf("the turn did not end in %d steps: %v", maxSteps, msgs)
	return nil, nil
}

// calls lists the tool calls of a conversation as name(arguments).
func calls(msgs []llm.Message) []string {
	var out []string
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			out = append(out, c.Name+string(c.Arguments))
		}
	}
	return out
}

// reporter is a competent model: it reports to agent-2, then ends its turn.
func reporter() *llmtest.Model {
	return llmtest.New(
		llmtest.Rule{AfterTool: "send_message", Response: llmtest.Say("已汇报。")},
		llmtest.Rule{Response: llmtest.Call("send_message", map[string]any{"message_type": "status_report", "payload": map[string]string{"text": "完成：artifact:a-1"}, "to": "agent-2"})},
	)
}

// sawOnly checks that the competent model was asked exactly the
// conversations want: what the personality did is hidden from it.
func sawOnly(t *testing.T, m *llmtest.Model, want ...[]llm.Message) {
	t.Helper()
	reqs := m.Requests()
	var got [][]llm.Message
	for _, r := range reqs {
		got = append(got, r.Messages)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the competent model saw (-want +got):\n%s", diff)
	}
}

func TestSpawnsSilently(t *testing.T) {
	inner := llmtest.New(
		llmtest.Rule{AfterTool: "send_message", Response: llmtest.Say("已委派。")},
		llmtest.Rule{AfterTool: "spawn_agent", Response: llmtest.Call("send_message", map[string]any{"to": "agent-3", "payload": map[string]string{"text": "开始吧"}})},
		llmtest.Rule{Response: llmtest.Call("spawn_agent", map[string]any{"roleId": "role-1", "taskBrief": map[string]string{"objective": "x"}})},
	)
	msgs, last := turn(t, llmtest.SpawnsSilently(inner), "【来自用户的消息】\n做点事", ok)
	if got := calls(msgs); len(got) != 1 || !strings.HasPrefix(got[0], "spawn_agent") {
		t.Errorf("calls = %q, want the spawn only", got)
	}
	if last.Message.Content != "" || len(last.Message.ToolCalls) != 0 {
		t.Errorf("the turn ended with %+v, want nothing", last.Message)
	}

	// A spawn that failed is not a reason to stop.
	refuse := func(c llm.ToolCall) string {
		if c.Name == "spawn_agent" {
			return `{"error":"invalid_brief","message":"no"}`
		}
		return ok(c)
	}
	inner = llmtest.New(
		llmtest.Rule{AfterTool: "spawn_agent", Response: llmtest.Say("委派失败。")},
		llmtest.Rule{Response: llmtest.Call("spawn_agent", map[string]any{"roleId": "role-1"})},
	)
	_, last = turn(t, llmtest.SpawnsSilently(inner), "【来自用户的消息】\n做点事", refuse)
	if last.Message.Content != "委派失败。" {
		t.Errorf("after a failed spawn the turn ended with %q", last.Message.Content)
	}
}

func TestPolls(t *testing.T) {
	inner := llmtest.New(llmtest.Rule{Response: llmtest.Say("等待。")})
	msgs, last := turn(t, llmtest.Polls(inner, 2), fromAgent, ok)
	want := []string{`get_artifact{"ref":"artifact:a-1"}`, `get_artifact{"ref":"artifact:a-1"}`}
	if diff := cmp.Diff(want, calls(msgs)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if last.Message.Content != "等待。" {
		t.Errorf("the turn ended with %q, want the competent model's answer", last.Message.Content)
	}
	sawOnly(t, inner, msgs[:1])

	// With no artifact in sight it asks the sender.
	inner = llmtest.New(llmtest.Rule{Response: llmtest.Say("等待。")})
	msgs, _ = turn(t, llmtest.Polls(inner, 1), "【来自 lead（agent-2）的消息】\n开始\n如需回复，请使用 send_message(to='agent-2', ...)", ok)
	want = []string{`send_message{"payload":{"text":"有进展吗？"},"to":"agent-2"}`}
	if diff := cmp.Diff(want, calls(msgs)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestPollsIgnoresEndTurn(t *testing.T) {
	// The competent model reports and ends its turn with end_turn; the
	// poller drops end_turn, so it is asked again, and polls before it
	// ends the turn with the competent model's answer.
	inner := llmtest.New(
		llmtest.Rule{AfterTool: "send_message", Response: llmtest.Say("已汇报。")},
		llmtest.Rule{Response: llmtest.Call("send_message", map[string]any{"to": "agent-2", "payload": map[string]string{"text": "完成：artifact:a-1"}, "end_turn": true})},
	)
	msgs, last := turn(t, llmtest.Polls(inner, 1), fromAgent, strict)
	want := []string{`send_message{"payload":{"text":"完成：artifact:a-1"},"to":"agent-2"}`, `get_artifact{"ref":"artifact:a-1"}`}
	if diff := cmp.Diff(want, calls(msgs)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if last.Message.Content != "已汇报。" {
		t.Errorf("the turn ended with %q, want the competent model's answer", last.Message.Content)
	}
	// The competent model saw its own call, end_turn included.
	if reqs := inner.Requests(); len(reqs) != 2 || !strings.Contains(string(reqs[1].Messages[1].ToolCalls[0].Arguments), `"end_turn":true`) {
		t.Errorf("the competent model was asked %d times and did not see its own call: %v", len(reqs), reqs)
	}
}

func TestAcknowledges(t *testing.T) {
	inner := reporter()
	msgs, _ := turn(t, llmtest.Acknowledges(inner), fromAgent, ok)
	got := calls(msgs)
	if len(got) != 2 || got[0] != `send_message{"payload":{"text":"收到你的汇报，谢谢！"},"to":"agent-2"}` || !strings.Contains(got[1], "status_report") {
		t.Errorf("calls = %q, want the acknowledgement, then the report", got)
	}
	if n := len(inner.Requests()); n != 2 {
		t.Fatalf("the competent model was asked %d times, want 2", n)
	}
	if first := inner.Requests()[0].Messages; len(first) != 1 {
		t.Errorf("the competent model saw the acknowledgement: %v", first)
	}

	// A message from user has no sender to answer.
	msgs, _ = turn(t, llmtest.Acknowledges(reporter()), "【来自用户的消息】\n你好", ok)
	if got := calls(msgs); len(got) != 1 {
		t.Errorf("calls = %q, want only the competent one", got)
	}
}

func TestProse(t *testing.T) {
	msgs, last := turn(t, llmtest.Prose(reporter()), fromAgent, ok)
	if got := calls(msgs); got != nil {
		t.Errorf("calls = %q, want none", got)
	}
	if want := "To agent-2: 完成：artifact:a-1"; last.Message.Content != want {
		t.Errorf("the turn ended with %q, want %q", last.Message.Content, want)
	}
}

func TestWrongKeys(t *testing.T) {
	inner := reporter()
	msgs, _ := turn(t, llmtest.WrongKeys(inner), fromAgent, strict)
	got := calls(msgs)
	want := []string{
		`send_message{"Payload":{"text":"完成：artifact:a-1"},"To":"agent-2","messageType":"status_report"}`,
		`send_message{"message_type":"status_report","payload":{"text":"完成：artifact:a-1"},"to":"agent-2"}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	// The competent model never saw its mistake.
	reqs := inner.Requests()
	if len(reqs) != 3 || len(reqs[1].Messages) != 1 {
		t.Errorf("the competent model saw %d requests, the second with %d messages; want 3, the second as the first", len(reqs), len(reqs[1].Messages))
	}

	// A brief as a string of JSON.
	spawner := llmtest.New(
		llmtest.Rule{AfterTool: "spawn_agent", Response: llmtest.Say("好。")},
		llmtest.Rule{Response: llmtest.Call("spawn_agent", map[string]any{"roleId": "role-1", "taskBrief": map[string]string{"objective": "x"}})},
	)
	msgs, _ = turn(t, llmtest.WrongKeys(spawner), fromAgent, strict)
	want = []string{
		`spawn_agent{"roleId":"role-1","taskBrief":"{\"objective\":\"x\"}"}`,
		`spawn_agent{"roleId":"role-1","taskBrief":{"objective":"x"}}`,
	}
	if diff := cmp.Diff(want, calls(msgs)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}

	// A mistake the tools accept stands, and the competent model sees its
	// own call.
	inner = reporter()
	msgs, _ = turn(t, llmtest.WrongKeys(inner), fromAgent, ok)
	if got := calls(msgs); len(got) != 1 || !strings.Contains(got[0], "messageType") {
		t.Errorf("calls = %q, want the one mistaken call", got)
	}
	if reqs := inner.Requests(); !strings.Contains(string(reqs[1].Messages[1].ToolCalls[0].Arguments), `"message_type"`) {
		t.Errorf("the competent model saw %s, not its own call", reqs[1].Messages[1].ToolCalls[0].Arguments)
	}
}

func TestPastesDocuments(t *testing.T) {
	inner := llmtest.New(
		llmtest.Rule{AfterTool: "send_message", Response: llmtest.Say("好。")},
		llmtest.Rule{AfterTool: "put_artifact", Response: llmtest.Call("send_message", map[string]any{"to": "agent-2", "payload": map[string]string{"text": "见 artifact:a-9"}})},
		llmtest.Rule{Response: llmtest.Call("put_artifact", map[string]string{"name": "译文", "content": "译文全文"})},
	)
	msgs, _ := turn(t, llmtest.PastesDocuments(inner, 50<<10, 7), fromAgent, ok)
	var text string
	for _, c := range msgs[3].ToolCalls {
		var a struct {
			Payload struct{ Text string } `json:"payload"`
		}
		json.Unmarshal(c.Arguments, &a)
		text = a.Payload.Text
	}
	if !strings.HasPrefix(text, "见 artifact:a-9\n\n全文如下：\n译文全文\n") || len(text) < 50<<10 {
		t.Errorf("the message is %d bytes and begins %q, want the text, then 50 KB from the artifact on", len(text), text[:min(len(text), 60)])
	}

	// The same seed pastes the same document.
	again, _ := turn(t, llmtest.PastesDocuments(inner, 50<<10, 7), fromAgent, ok)
	if diff := cmp.Diff(calls(msgs), calls(again)); diff != "" {
		t.Errorf("two runs with one seed differ:\n%s", diff)
	}
}

func TestInventsIDs(t *testing.T) {
	msgs, _ := turn(t, llmtest.InventsIDs(reporter(), 1), fromAgent, strict)
	got := calls(msgs)
	if len(got) != 2 || strings.Contains(got[0], `"to":"agent-2"`) || !strings.Contains(got[1], `"to":"agent-2"`) {
		t.Errorf("calls = %q, want one to an invented agent, then the right one", got)
	}
	again, _ := turn(t, llmtest.InventsIDs(reporter(), 1), fromAgent, strict)
	if diff := cmp.Diff(got, calls(again)); diff != "" {
		t.Errorf("two runs with one seed differ:\n%s", diff)
	}

	// A request id.
	responder := llmtest.New(
		llmtest.Rule{AfterTool: "send_message", Response: llmtest.Say("好。")},
		llmtest.Rule{Response: llmtest.Call("send_message", map[string]any{"to": "agent-2", "message_type": "collaboration_response",
			"payload": map[string]any{"request_id": "req-abc", "status": "completed"}})},
	)
	refuseRequest := func(c llm.ToolCall) string {
		if !strings.Contains(string(c.Arguments), "req-abc") {
			return `{"error":"unknown_request","message":"no such request"}`
		}
		return ok(c)
	}
	msgs, _ = turn(t, llmtest.InventsIDs(responder, 1), fromAgent, refuseRequest)
	if got := calls(msgs); len(got) != 2 || strings.Contains(got[0], "req-abc") || !strings.Contains(got[0], `"request_id":"req-`) || !strings.Contains(got[1], "req-abc") {
		t.Errorf("calls = %q, want one with an invented request id, then the right one", got)
	}
}

func TestTruncates(t *testing.T) {
	// Every reply cut off: the call's arguments are cut, then corrected;
	// the final text is cut too.
	msgs, last := turn(t, llmtest.Truncates(reporter(), 1), fromAgent, strict)
	got := calls(msgs)
	if len(got) != 2 || json.Valid([]byte(strings.TrimPrefix(got[0], "send_message"))) || !json.Valid([]byte(strings.TrimPrefix(got[1], "send_message"))) {
		t.Errorf("calls = %q, want one cut off, then the whole one", got)
	}
	if !last.Truncated || last.Message.Content != "已汇" {
		t.Errorf("the turn ended with %q (truncated %v), want the first half of 已汇报。", last.Message.Content, last.Truncated)
	}

	// Every second reply of each agent.
	m := llmtest.Truncates(llmtest.New(llmtest.Rule{Response: llmtest.Say("四个字。")}), 2)
	var cut []bool
	for range 4 {
		resp, err := m.Generate(context.Background(), &llm.Request{Agent: "agent-1", Messages: []llm.Message{{Role: llm.RoleUser, Content: "?"}}})
		if err != nil {
			t.Fatal(err)
		}
		cut = append(cut, resp.Truncated)
	}
	if diff := cmp.Diff([]bool{false, true, false, true}, cut); diff != "" {
		t.Errorf("truncated (-want +got):\n%s", diff)
	}
}

func TestMix(t *testing.T) {
	good := llmtest.New(llmtest.Rule{Response: llmtest.Say("good")})
	bad := llmtest.New(llmtest.Rule{Response: llmtest.Say("bad")})
	m := llmtest.Mix(good, bad, func(req *llm.Request) bool { return req.Agent == "agent-5" })
	for agent, want := range map[string]string{"agent-4": "good", "agent-5": "bad"} {
		resp, err := m.Generate(context.Background(), &llm.Request{Agent: agent})
		if err != nil || resp.Message.Content != want {
			t.Errorf("%s: %v, %v; want %q", agent, resp, err, want)
		}
	}
}

func TestPersonalities(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range llmtest.Personalities() {
		if p.Name == "" || p.Does == "" || p.Wrap == nil || seen[p.Name] {
			t.Errorf("personality %+v: want a unique name, a description and Wrap", p)
		}
		seen[p.Name] = true
		// Each wraps a competent model and lets a turn end.
		turn(t, p.Wrap(reporter()), fromAgent, strict)
	}
	if len(seen) != 8 {
		t.Errorf("%d personalities, want 8", len(seen))
	}
}
