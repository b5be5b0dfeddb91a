// Package script holds what the examples' scripted models share: reading a
// request the way a model reads it, and writing the replies.
//
// A scripted model (see package llm/llmtest) decides every step from the
// request alone, as a real model would: which agent is asking (the role
// line of its system prompt), what the message that opened its turn says
// (its Requirement 10 source line and payload), and which tool results came
// back. The functions here do that reading against the society's default
// prompts and message formatting, so that the scripts never assume an id.
package script

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// ---- replies ----

// Call returns a reply that calls one tool with args encoded as JSON the
// way models write it (see [ToolCall]).
func Call(name string, args any) *llm.Response {
	return llmtest.Calls(ToolCall(name, args))
}

// ToolCall returns a call of tool name with args encoded as JSON the way
// models write it: "<" stays "<", where json.Marshal would write \u003c.
// Nil args are written {}.
func ToolCall(name string, args any) llm.ToolCall {
	if args == nil {
		return llm.ToolCall{Name: name, Arguments: json.RawMessage("{}")}
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(args); err != nil {
		panic(fmt.Sprintf("script: the arguments of %s: %v", name, err))
	}
	return llm.ToolCall{Name: name, Arguments: json.RawMessage(strings.TrimSpace(b.String()))}
}

// ToolFailed is the reply to a failed tool call (see [LastToolFailed]): the
// script does not retry, and the agent ends its turn saying what failed.
func ToolFailed(req *llm.Request) (*llm.Response, error) {
	return llmtest.Say("工具调用失败：" + req.Messages[len(req.Messages)-1].Content + "。演示脚本不再重试，本轮到此为止。"), nil
}

// Fallback is the reply to a request the script has no step for: the agent
// ends its turn.
func Fallback(req *llm.Request) (*llm.Response, error) {
	return llmtest.Say("（演示脚本没有为这一步准备动作，本轮到此为止。）"), nil
}

// ---- the system prompt ----

var (
	sourceRe  = regexp.MustCompile(`【来自 (.+?)（([^（）]+)）的消息】`)
	refRe     = regexp.MustCompile(`artifact:[A-Za-z0-9-]+`)
	roleRe    = regexp.MustCompile(`(?m)^- ID：[^；\n]+；岗位：([^；\n]+)`)
	parentRe  = regexp.MustCompile(`(?m)^- 父级：([^（\s]+)`)
	contactRe = regexp.MustCompile(`(?m)^- ([^（\s]+)（([^，）]+)，`)
	childRe   = regexp.MustCompile(`(?m)^- 子级（(.+?)）：(?:已汇报|未汇报) ([^；、.\s]+)`)
)

func match(re *regexp.Regexp, s string) string {
	if m := re.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// RefIn returns the first artifact reference (artifact:<id>) in s, or "".
func RefIn(s string) string { return refRe.FindString(s) }

// Role returns the agent's role name from the runtime facts of its system
// prompt ("- ID：agent-1；岗位：lead；taskId：…"), or "".
func Role(system string) string { return match(roleRe, system) }

// RoleMark is what the system prompt of every agent on the role named name
// contains, for [llmtest.Rule.SystemContains]: the role in the runtime facts
// of an agent that works on a task, as every agent below root does.
func RoleMark(name string) string { return "；岗位：" + name + "；taskId：" }

// Parent returns the id of the agent's parent from the runtime facts of its
// system prompt ("- 父级：root（root）；…"), or "".
func Parent(system string) string { return match(parentRe, system) }

// ContactWithRole returns the id of the first agent on the role named role
// that the contacts section of a system prompt shows: a contact
// ("- agent-3（tester，preset）") or a child ("- 子级（tester）：未汇报
// agent-3"). It returns "" when there is none.
func ContactWithRole(system, role string) string {
	_, contacts, ok := strings.Cut(system, "## 联系人\n")
	if !ok {
		return ""
	}
	contacts, _, _ = strings.Cut(contacts, "\n## ")
	for _, m := range contactRe.FindAllStringSubmatch(contacts, -1) {
		if m[2] == role {
			return m[1]
		}
	}
	for _, m := range childRe.FindAllStringSubmatch(contacts, -1) {
		if m[1] == role {
			return m[2]
		}
	}
	return ""
}

// ---- the brief ----

// briefText returns the agent's Task Brief as it reads it: the body of the
// task_assignment its parent's spawn sent it, the first message of its
// history, without the source line, the type line and the reply hint.
// It returns "" when the history holds no task_assignment.
func briefText(req *llm.Request) string {
	for _, msg := range req.Messages {
		if msg.Role != llm.RoleUser {
			continue
		}
		if m := ParseMessage(msg.Content); m.Type == string(as.TaskAssignment) {
			_, body, _ := strings.Cut(m.Content, "message_type: "+string(as.TaskAssignment)+"\n")
			if i := strings.LastIndex(body, replyHint); i >= 0 {
				body = body[:i]
			}
			return body
		}
	}
	return ""
}

// BriefField returns a one-line field of the agent's Task Brief as the
// task_assignment that opened its history shows it, or "".
func BriefField(req *llm.Request, name string) string {
	for line := range strings.SplitSeq(briefText(req), "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return v
		}
	}
	return ""
}

// BriefList returns a list field of the agent's Task Brief as the
// task_assignment that opened its history shows it: nil when it is absent,
// empty when the brief says "(none)".
func BriefList(req *llm.Request, name string) []string {
	var out []string
	in := false
	for line := range strings.SplitSeq(briefText(req), "\n") {
		switch {
		case line == name+":":
			in, out = true, []string{}
		case !in:
		case strings.HasPrefix(line, "  - "):
			out = append(out, strings.TrimPrefix(line, "  - "))
		case line == "  (none)":
		default:
			return out
		}
	}
	return out
}

// ---- delivered messages ----

// Message is a delivered message as the agent reads it.
type Message struct {
	Content  string         // as presented (Requirement 10)
	From     string         // the sender's id from the source line; "user" for the user
	FromRole string         // the sender's role from the source line
	Text     string         // the content without the source line and the reply hint
	Type     string         // message_type, "" for a general message
	Payload  map[string]any // the structured payload of a typed message, and its text; never nil
}

// turnStart returns the index of the delivered message that opened the
// current turn: the newest message from the society rather than a tool.
func turnStart(msgs []llm.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			return i
		}
	}
	return -1
}

// TurnMessage reads the message that opened the current turn: an empty
// Message when there is none.
func TurnMessage(req *llm.Request) Message {
	i := turnStart(req.Messages)
	if i < 0 {
		return Message{Payload: map[string]any{}}
	}
	return ParseMessage(req.Messages[i].Content)
}

// replyHint opens the hint that ends a message from an agent.
const replyHint = "\n如需回复，请使用 send_message("

// ParseMessage reads a delivered message from its content: the source line
// (the user's, or 【来自 role（id）的消息】), the reply hint, and for a typed
// message its type and payload.
func ParseMessage(content string) Message {
	m := Message{Content: content, Payload: map[string]any{}}
	body := content
	if rest, ok := strings.CutPrefix(content, "【来自用户的消息】\n"); ok {
		m.From, m.FromRole, body = as.UserID, as.UserID, rest
	} else if s := sourceRe.FindStringSubmatchIndex(content); s != nil && s[0] == 0 {
		m.FromRole, m.From = content[s[2]:s[3]], content[s[4]:s[5]]
		body = strings.TrimPrefix(content[s[1]:], "\n")
	}
	if i := strings.LastIndex(body, replyHint); i >= 0 {
		body = body[:i]
	}
	m.Text = body
	// A typed message reads "{text}\nmessage_type: {type}\n{payload as JSON}".
	if i := strings.Index(body, "message_type: "); i >= 0 && (i == 0 || body[i-1] == '\n') {
		head, rest, _ := strings.Cut(body[i+len("message_type: "):], "\n")
		m.Type = head
		json.Unmarshal([]byte(rest), &m.Payload)
		m.Text = strings.TrimSuffix(body[:i], "\n")
	}
	if m.Text != "" {
		if _, ok := m.Payload["text"]; !ok {
			m.Payload["text"] = m.Text
		}
	}
	return m
}

// Delivered reports whether the request's last message is a delivered
// message rather than a tool result: the call is its turn's first.
func Delivered(req *llm.Request) bool {
	n := len(req.Messages)
	return n > 0 && req.Messages[n-1].Role == llm.RoleUser
}

// FromUser reports whether the request delivers a message from user.
func FromUser(req *llm.Request) bool { return Delivered(req) && TurnMessage(req).From == as.UserID }

// FromRole returns a condition that holds when the request delivers a
// message from an agent on the role named role.
func FromRole(role string) func(*llm.Request) bool {
	return func(req *llm.Request) bool { return Delivered(req) && TurnMessage(req).FromRole == role }
}

// DeliveredType returns a condition that holds when the request delivers a
// message of type t.
func DeliveredType(t as.MessageType) func(*llm.Request) bool {
	return func(req *llm.Request) bool { return Delivered(req) && TurnMessage(req).Type == string(t) }
}

// ---- tool results ----

// Result is a decoded tool result.
type Result struct {
	Raw    json.RawMessage // as the tool returned it
	Fields map[string]any  // its top-level fields
}

// Str returns the string field name of r, or "".
func (r Result) Str(name string) string {
	s, _ := r.Fields[name].(string)
	return s
}

func decodeResult(content string) Result {
	r := Result{Raw: json.RawMessage(content)}
	json.Unmarshal(r.Raw, &r.Fields)
	return r
}

// LastResult decodes the tool result that is the request's last message.
func LastResult(req *llm.Request) (Result, error) {
	n := len(req.Messages)
	if n == 0 || req.Messages[n-1].Role != llm.RoleTool {
		return Result{}, errors.New("script: the last message is not a tool result")
	}
	return decodeResult(req.Messages[n-1].Content), nil
}

// LastToolFailed reports whether the request's last message is a tool
// result that reports an error.
func LastToolFailed(req *llm.Request) bool {
	r, err := LastResult(req)
	if err != nil {
		return false
	}
	_, failed := r.Fields["error"]
	return failed
}

// Called is a tool call of the current turn with its result.
type Called struct {
	Name   string         // the tool
	Args   map[string]any // the decoded arguments
	Result Result
}

// TurnCalls returns the tool calls of the current turn that have their
// results, oldest first.
func TurnCalls(req *llm.Request) []Called {
	type pending struct {
		name string
		args map[string]any
	}
	called := map[string]pending{}
	var out []Called
	for _, msg := range req.Messages[max(turnStart(req.Messages), 0):] {
		switch msg.Role {
		case llm.RoleAssistant:
			for _, c := range msg.ToolCalls {
				var args map[string]any
				json.Unmarshal(c.Arguments, &args)
				called[c.ID] = pending{c.Name, args}
			}
		case llm.RoleTool:
			if c, ok := called[msg.ToolCallID]; ok {
				out = append(out, Called{c.name, c.args, decodeResult(msg.Content)})
			}
		}
	}
	return out
}

// Results returns the results of the calls to tool in the current turn,
// oldest first.
func Results(req *llm.Request, tool string) []Result {
	var out []Result
	for _, c := range TurnCalls(req) {
		if c.Name == tool {
			out = append(out, c.Result)
		}
	}
	return out
}

// RoleNamed returns the id of the role named name that create_role returned
// this turn, or "".
func RoleNamed(req *llm.Request, name string) string {
	for _, r := range Results(req, "create_role") {
		if r.Str("name") == name {
			return r.Str("roleId")
		}
	}
	return ""
}

// SpawnedOn returns the id of the agent spawn_agent made on role this turn,
// or "".
func SpawnedOn(req *llm.Request, role string) string {
	for _, r := range Results(req, "spawn_agent") {
		if r.Str("roleId") == role {
			return r.Str("agentId")
		}
	}
	return ""
}
