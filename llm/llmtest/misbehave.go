package llmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"agentsociety/llm"
)

// Misbehaving models.
//
// A society that works only with models that follow its protocol perfectly
// will not survive a real one. The personalities below each wrap a
// competent model (a script that follows the protocol) and make one of the
// mistakes real models make, so that a test can mix them into an otherwise
// competent society and check what the society does about it.
//
// The personalities know the built-in tools of package agentsociety by
// name (spawn_agent, send_message, put_artifact, get_artifact) and their
// end_turn argument, and find the sender of a delivered message from its
// reply hint, send_message(to='<id>', ...). Everything else they learn from
// the request: they never assume an id.
//
// Each is deterministic: what it does to an agent's calls depends only on
// that agent's requests, and the random choices of the personalities that
// make any come from a seed. Each is safe for concurrent use, as
// [llm.Model] requires, keeping what it must remember per agent.
//
// A personality that makes a mistake in a tool call makes it once per call
// and corrects it when the tool refuses the call, as a real model does when
// the error tells it what was wrong: the competent model is then asked
// again as if the mistaken call had never been made. A mistake the society
// accepts stands. Calls a personality adds of its own (a poll, an
// acknowledgement) are hidden from the competent model in the same way, so
// that the script it follows is not confused by calls it did not make.

// A Personality is a way of misbehaving: a name for tables and logs, what
// the model does, and the function that applies it to a competent model.
type Personality struct {
	// Name is a short name, such as "prose".
	Name string
	// Does says, in one line, what a model of this personality does.
	Does string
	// Wrap returns a model that behaves as competent does except for this
	// personality's misbehaviour.
	Wrap func(competent llm.Model) llm.Model
}

// Personalities returns one of each personality of this package, with the
// settings a suite would use: polling three times, pasting 50 KB, cutting
// off every third reply, and seed 1 for the random choices.
func Personalities() []Personality {
	return []Personality{
		{"spawns-silently", "ends its turn without a word as soon as a spawn succeeds, the rest of the turn undone", SpawnsSilently},
		{"polls", "never sets end_turn, and polls (get_artifact, \"any progress?\") three times before ending its turn",
			func(m llm.Model) llm.Model { return Polls(m, 3) }},
		{"acknowledges", "acknowledges every message and answers every status report", Acknowledges},
		{"prose", "answers in prose instead of calling send_message, the final answer included", Prose},
		{"wrong-keys", "uses wrong argument keys and casing, and passes a brief as a JSON string", WrongKeys},
		{"pastes", "pastes a 50 KB document into its messages instead of an artifact",
			func(m llm.Model) llm.Model { return PastesDocuments(m, 50<<10, 1) }},
		{"invents-ids", "invents agent ids and request ids", func(m llm.Model) llm.Model { return InventsIDs(m, 1) }},
		{"truncates", "stops mid-answer (finish_reason: length) on every third reply",
			func(m llm.Model) llm.Model { return Truncates(m, 3) }},
	}
}

// Mix returns a model that answers with misbehaving the requests for which
// affected reports true, and with competent the others: how a test puts a
// misbehaving model into some agents of an otherwise competent society,
// for example the agents of one role, picked by their system prompt.
func Mix(competent, misbehaving llm.Model, affected func(req *llm.Request) bool) llm.Model {
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if affected(req) {
			return misbehaving.Generate(ctx, req)
		}
		return competent.Generate(ctx, req)
	})
}

// wrapper is what the personalities share: the competent model, and what
// the personality did to the conversation, which it hides from the
// competent model.
type wrapper struct {
	inner  llm.Model
	prefix string // of the ids of the calls the personality makes itself

	mu       sync.Mutex
	own      map[string]bool         // ids of calls the personality made itself
	mistaken map[string]llm.ToolCall // ids of calls it changed, to the call the competent model made
	n        int                     // ids made so far
	agents   map[string]int          // per agent, a counter the personality keeps
}

func newWrapper(inner llm.Model, prefix string) *wrapper {
	return &wrapper{inner: inner, prefix: prefix, own: map[string]bool{}, mistaken: map[string]llm.ToolCall{}, agents: map[string]int{}}
}

// call returns a call of the personality's own, with a fresh id.
func (w *wrapper) call(name string, args any) llm.ToolCall {
	raw, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("llmtest: the arguments of %s: %v", name, err))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	id := fmt.Sprintf("%s_%d", w.prefix, w.n)
	w.own[id] = true
	return llm.ToolCall{ID: id, Name: name, Arguments: raw}
}

// ownResponse returns a reply that makes the personality's own calls.
func (w *wrapper) ownResponse(calls ...llm.ToolCall) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: calls}}
}

// mistake records that the call with id was changed from original. The
// caller gives the reply's calls ids first (see [wrapper.ensureIDs]).
func (w *wrapper) mistake(original llm.ToolCall) {
	w.mu.Lock()
	w.mistaken[original.ID] = original
	w.mu.Unlock()
}

// ensureIDs gives every call of resp an id, so that the personality can
// recognise it when its result comes back.
func (w *wrapper) ensureIDs(resp *llm.Response) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range resp.Message.ToolCalls {
		if resp.Message.ToolCalls[i].ID == "" {
			w.n++
			resp.Message.ToolCalls[i].ID = fmt.Sprintf("%s_%d", w.prefix, w.n)
		}
	}
}

// count adds one to agent's counter and returns its new value.
func (w *wrapper) count(agent string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.agents[agent]++
	return w.agents[agent]
}

// generate asks the competent model about req as it would have been had
// the personality not misbehaved: without the personality's own calls and
// their results, without the mistaken calls that were refused and their
// errors, and with the competent model's own arguments in the mistaken
// calls that were accepted.
func (w *wrapper) generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	w.mu.Lock()
	view := *req
	view.Messages = nil
	drop := map[string]bool{}
	for _, msg := range req.Messages {
		if msg.Role == llm.RoleTool && w.mistaken[msg.ToolCallID].ID != "" && failed(msg.Content) {
			drop[msg.ToolCallID] = true
		}
	}
	for _, msg := range req.Messages {
		switch msg.Role {
		case llm.RoleTool:
			if w.own[msg.ToolCallID] || drop[msg.ToolCallID] {
				continue
			}
		case llm.RoleAssistant:
			var calls []llm.ToolCall
			for _, c := range msg.ToolCalls {
				switch {
				case w.own[c.ID] || drop[c.ID]:
				case w.mistaken[c.ID].ID != "":
					calls = append(calls, w.mistaken[c.ID])
				default:
					calls = append(calls, c)
				}
			}
			if len(calls) == 0 && len(msg.ToolCalls) > 0 && msg.Content == "" {
				continue // only the personality's doing
			}
			msg.ToolCalls = calls
		}
		view.Messages = append(view.Messages, msg)
	}
	w.mu.Unlock()
	return w.inner.Generate(ctx, &view)
}

// errCalls returns a model that asks the competent one and then, unless
// it is correcting a mistake (see [wrapper.correcting]), passes each tool
// call of the reply to mistake: a call for which mistake returns arguments
// and true is made with those arguments instead, and remembered as a
// mistake, so that it is corrected if the society refuses it.
func (w *wrapper) errCalls(mistake func(req *llm.Request, c llm.ToolCall) (json.RawMessage, bool)) llm.Model {
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		correcting := w.correcting(req)
		resp, err := w.generate(ctx, req)
		if err != nil || correcting {
			return resp, err
		}
		w.ensureIDs(resp)
		for i, c := range resp.Message.ToolCalls {
			if args, ok := mistake(req, c); ok {
				w.mistake(c)
				resp.Message.ToolCalls[i].Arguments = args
			}
		}
		return resp, nil
	})
}

// correcting reports whether req's last message is the refusal of a call
// the personality changed: the model has read the error and corrects its
// mistake, so its next reply is the competent one.
func (w *wrapper) correcting(req *llm.Request) bool {
	last, ok := lastMessage(req)
	if !ok || last.Role != llm.RoleTool || !failed(last.Content) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mistaken[last.ToolCallID].ID != ""
}

// failed reports whether a tool result is an error: the society's failed
// calls return {"error": code, "message": ...}.
func failed(result string) bool {
	var r struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal([]byte(result), &r) == nil && len(r.Error) > 0 && string(r.Error) != "null"
}

func lastMessage(req *llm.Request) (llm.Message, bool) {
	if len(req.Messages) == 0 {
		return llm.Message{}, false
	}
	return req.Messages[len(req.Messages)-1], true
}

// turnOpened reports whether req's last message is a delivered message:
// the call is the first of a turn.
func turnOpened(req *llm.Request) bool {
	last, ok := lastMessage(req)
	return ok && last.Role == llm.RoleUser
}

var replyHint = regexp.MustCompile(`send_message\(to='([^']+)'`)

// sender returns the id of the sender of a delivered message, from its
// reply hint, or "" when it has none (a message from user).
func sender(content string) string {
	m := replyHint.FindAllStringSubmatch(content, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

// ---- spawns silently ----

// SpawnsSilently returns a model that behaves as m does, except that once a
// spawn_agent call of its has succeeded it ends its turn at once, with
// neither text nor tool call: the child starts on its brief, but whatever
// else the model meant to do in that turn (spawn another, send a message)
// is not done, and nobody is told.
func SpawnsSilently(m llm.Model) llm.Model {
	w := newWrapper(m, "silent")
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if last, ok := lastMessage(req); ok && last.Role == llm.RoleTool && !failed(last.Content) && calledTool(req, last.ToolCallID) == "spawn_agent" {
			return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant}}, nil
		}
		return w.generate(ctx, req)
	})
}

// calledTool returns the name of the tool of the call with id in req.
func calledTool(req *llm.Request, id string) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		for _, c := range req.Messages[i].ToolCalls {
			if c.ID == id {
				return c.Name
			}
		}
	}
	return ""
}

// ---- polls ----

// Polls returns a model that behaves as m does, except that it never ends
// its turn with end_turn (it drops the argument from m's calls, and m is
// asked again after them, as the society does), and where m would end its
// turn (a reply without tool calls) it first polls n times, one call a
// reply: it reads again the newest artifact it has seen a reference to
// (get_artifact), or, when it has seen none, asks the agent it last sent to
// (or, failing that, the sender of the message that opened the turn)
// "有进展吗？" (any progress?). Then it ends its turn with m's reply.
func Polls(m llm.Model, n int) llm.Model {
	w := newWrapper(m, "poll")
	competent := w.errCalls(func(_ *llm.Request, c llm.ToolCall) (json.RawMessage, bool) { return without(c.Arguments, "end_turn") })
	var mu sync.Mutex
	ending := map[string]*llm.Response{} // per agent, the reply that ends its turn once it has polled
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		polled := pollsThisTurn(w, req)
		mu.Lock()
		resp := ending[req.Agent]
		delete(ending, req.Agent)
		mu.Unlock()
		if polled == 0 || resp == nil {
			var err error
			if resp, err = competent.Generate(ctx, req); err != nil {
				return nil, err
			}
		}
		if len(resp.Message.ToolCalls) > 0 || polled >= n {
			return resp, nil
		}
		var poll llm.ToolCall
		if ref := newestRef(req); ref != "" {
			poll = w.call("get_artifact", map[string]string{"ref": ref})
		} else if to := lastAddressee(req); to != "" {
			poll = w.call("send_message", map[string]any{"to": to, "payload": map[string]string{"text": "有进展吗？"}})
		} else {
			return resp, nil
		}
		mu.Lock()
		ending[req.Agent] = resp
		mu.Unlock()
		return w.ownResponse(poll), nil
	})
}

// pollsThisTurn counts the personality's own calls since the turn opened.
func pollsThisTurn(w *wrapper, req *llm.Request) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != llm.RoleUser; i-- {
		for _, c := range req.Messages[i].ToolCalls {
			if w.own[c.ID] {
				n++
			}
		}
	}
	return n
}

// without returns args without key, and false when they have no such key.
func without(args json.RawMessage, key string) (json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(args, &obj) != nil || obj[key] == nil {
		return nil, false
	}
	delete(obj, key)
	out, err := json.Marshal(obj)
	return out, err == nil
}

var refPattern = regexp.MustCompile(`artifact:[A-Za-z0-9_-]+`)

// newestRef returns the newest artifact reference in req's messages.
func newestRef(req *llm.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		msg := &req.Messages[i]
		if refs := refPattern.FindAllString(msg.Content, -1); len(refs) > 0 {
			return refs[len(refs)-1]
		}
		for _, c := range msg.ToolCalls {
			if refs := refPattern.FindAllString(string(c.Arguments), -1); len(refs) > 0 {
				return refs[len(refs)-1]
			}
		}
	}
	return ""
}

// lastAddressee returns the agent the conversation last sent a message to,
// or the sender of the newest delivered message.
func lastAddressee(req *llm.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		msg := &req.Messages[i]
		for _, c := range msg.ToolCalls {
			if c.Name == "send_message" {
				var a struct {
					To string `json:"to"`
				}
				if json.Unmarshal(c.Arguments, &a) == nil && a.To != "" {
					return a.To
				}
			}
		}
		if msg.Role == llm.RoleUser {
			if from := sender(msg.Content); from != "" {
				return from
			}
		}
	}
	return ""
}

// ---- acknowledges ----

// Acknowledges returns a model that behaves as m does, except that every
// turn opened by a message from another agent starts with an answer to its
// sender: "收到，谢谢！" (received, thanks), and for a status report
// "收到你的汇报，谢谢！". Then it goes on as m would.
func Acknowledges(m llm.Model) llm.Model {
	w := newWrapper(m, "ack")
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		if turnOpened(req) {
			last, _ := lastMessage(req)
			if from := sender(last.Content); from != "" {
				text := "收到，谢谢！"
				if strings.Contains(last.Content, "message_type: status_report") {
					text = "收到你的汇报，谢谢！"
				}
				return w.ownResponse(w.call("send_message", map[string]any{"to": from, "payload": map[string]string{"text": text}})), nil
			}
		}
		return w.generate(ctx, req)
	})
}

// ---- prose ----

// Prose returns a model that behaves as m does, except that it never calls
// send_message: it writes what it would have sent as the text of its reply
// instead (the payload's text, or the payload as JSON when it has none),
// so that a reply that only sent ends the turn with text that reaches
// nobody. Its final answer to the user is written the same way.
func Prose(m llm.Model) llm.Model {
	w := newWrapper(m, "prose")
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		resp, err := w.generate(ctx, req)
		if err != nil {
			return nil, err
		}
		var kept []llm.ToolCall
		var text []string
		if resp.Message.Content != "" {
			text = append(text, resp.Message.Content)
		}
		for _, c := range resp.Message.ToolCalls {
			if c.Name != "send_message" {
				kept = append(kept, c)
				continue
			}
			var a struct {
				To      string          `json:"to"`
				Payload json.RawMessage `json:"payload"`
			}
			json.Unmarshal(c.Arguments, &a)
			var p struct {
				Text string `json:"text"`
			}
			body := string(a.Payload)
			if json.Unmarshal(a.Payload, &p) == nil && p.Text != "" {
				body = p.Text
			}
			text = append(text, "To "+a.To+": "+body)
		}
		resp.Message.ToolCalls = kept
		resp.Message.Content = strings.Join(text, "\n\n")
		return resp, nil
	})
}

// ---- wrong keys ----

// WrongKeys returns a model that behaves as m does, except that it gets its
// arguments' shape wrong: a spawn_agent call passes its taskBrief as a
// string of JSON rather than an object, and every other call writes its
// top-level argument keys in the other case convention (message_type as
// messageType, roleId as role_id, and a one-word key such as to
// capitalised, To). It corrects a call the society refuses.
func WrongKeys(m llm.Model) llm.Model {
	return newWrapper(m, "keys").errCalls(func(_ *llm.Request, c llm.ToolCall) (json.RawMessage, bool) { return wrongKeys(c) })
}

// wrongKeys returns c's arguments with the wrong shape, and false when
// they have nothing to get wrong.
func wrongKeys(c llm.ToolCall) (json.RawMessage, bool) {
	var args map[string]json.RawMessage
	if json.Unmarshal(c.Arguments, &args) != nil || len(args) == 0 {
		return nil, false
	}
	if brief, ok := args["taskBrief"]; ok && c.Name == "spawn_agent" {
		s, _ := json.Marshal(string(brief))
		args["taskBrief"] = s
	} else {
		wrong := make(map[string]json.RawMessage, len(args))
		for k, v := range args {
			wrong[otherCase(k)] = v
		}
		args = wrong
	}
	out, err := json.Marshal(args)
	return out, err == nil
}

// otherCase writes key in the other convention: snake_case as camelCase,
// camelCase as snake_case, and one lower-case word capitalised.
func otherCase(key string) string {
	if strings.Contains(key, "_") {
		var b strings.Builder
		up := false
		for _, r := range key {
			switch {
			case r == '_':
				up = true
			case up:
				b.WriteRune(unicode.ToUpper(r))
				up = false
			default:
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	if strings.ToLower(key) != key {
		var b strings.Builder
		for _, r := range key {
			if unicode.IsUpper(r) {
				b.WriteByte('_')
				r = unicode.ToLower(r)
			}
			b.WriteRune(r)
		}
		return b.String()
	}
	if key == "" {
		return key
	}
	return strings.ToUpper(key[:1]) + key[1:]
}

// ---- pastes documents ----

// PastesDocuments returns a model that behaves as m does, except that every
// message it sends carries a document of size bytes pasted after its text,
// where an artifact reference belonged: the content of the artifacts it
// stored in the conversation (put_artifact), followed by filler text drawn
// from seed up to size.
func PastesDocuments(m llm.Model, size int, seed uint64) llm.Model {
	w := newWrapper(m, "paste")
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		resp, err := w.generate(ctx, req)
		if err != nil {
			return nil, err
		}
		for i, c := range resp.Message.ToolCalls {
			if c.Name != "send_message" {
				continue
			}
			var args map[string]any
			if json.Unmarshal(c.Arguments, &args) != nil {
				continue
			}
			payload, _ := args["payload"].(map[string]any)
			if payload == nil {
				payload = map[string]any{}
			}
			text, _ := payload["text"].(string)
			payload["text"] = text + "\n\n全文如下：\n" + document(req, size, seed)
			args["payload"] = payload
			if raw, err := json.Marshal(args); err == nil {
				resp.Message.ToolCalls[i].Arguments = raw
			}
		}
		return resp, nil
	})
}

// document returns size bytes: the contents the conversation stored as
// artifacts, then filler.
func document(req *llm.Request, size int, seed uint64) string {
	var b strings.Builder
	for _, msg := range req.Messages {
		for _, c := range msg.ToolCalls {
			if c.Name != "put_artifact" {
				continue
			}
			var a struct {
				Content string `json:"content"`
			}
			if json.Unmarshal(c.Arguments, &a) == nil {
				b.WriteString(a.Content)
				b.WriteString("\n")
			}
		}
	}
	words := []string{"the", "society", "of", "agents", "report", "document", "section", "result", "translation", "and", "is", "for", "with", "每个", "智能体", "文档", "结果"}
	r := rand.New(rand.NewPCG(seed, 0))
	for b.Len() < size {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return cut(b.String(), size)
}

// cut shortens s to at most n bytes, on a rune boundary, as a model's
// output limit cuts its answer.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ---- invents ids ----

// InventsIDs returns a model that behaves as m does, except that it makes
// up the ids it should have copied: the "to" of a send_message call
// becomes an agent id of its own invention, and
// the request_id of a collaboration_response a request id of its own
// invention, both drawn from seed. Invented agent ids run from agent-1000 to
// agent-1999, so that in a society of fewer agents they name nobody. It
// corrects a call the society refuses.
func InventsIDs(m llm.Model, seed uint64) llm.Model {
	w := newWrapper(m, "invent")
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 0))
	invent := func(format string, n int) string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf(format, r.IntN(n))
	}
	return w.errCalls(func(_ *llm.Request, c llm.ToolCall) (json.RawMessage, bool) {
		if c.Name != "send_message" {
			return nil, false
		}
		var args map[string]any
		if json.Unmarshal(c.Arguments, &args) != nil {
			return nil, false
		}
		if p, ok := args["payload"].(map[string]any); ok && p["request_id"] != nil {
			p["request_id"] = invent("req-%016x", 1<<62)
		} else {
			args["to"] = invent("agent-1%03d", 1000) // agent-1000 to agent-1999
		}
		raw, err := json.Marshal(args)
		return raw, err == nil
	})
}

// ---- truncates ----

// Truncates returns a model that behaves as m does, except that every
// every-th reply to each agent (the every-th, the 2·every-th, ...) is cut
// off at the model's output limit, as a provider's finish_reason "length"
// reports: Truncated is set, the text is cut in half, and the arguments of
// the last tool call are cut in half, so that they are no longer valid
// JSON. An every of one or less cuts off every reply. It corrects a call
// the society refuses; a cut-off reply without tool calls is the caller's
// to handle.
func Truncates(m llm.Model, every int) llm.Model {
	w := newWrapper(m, "cut")
	every = max(every, 1)
	return llm.ModelFunc(func(ctx context.Context, req *llm.Request) (*llm.Response, error) {
		correcting := w.correcting(req)
		resp, err := w.generate(ctx, req)
		if err != nil || correcting || w.count(req.Agent)%every != 0 {
			return resp, err
		}
		w.ensureIDs(resp)
		resp.Truncated = true
		resp.Message.Content = cut(resp.Message.Content, len(resp.Message.Content)/2)
		if n := len(resp.Message.ToolCalls); n > 0 {
			c := &resp.Message.ToolCalls[n-1]
			w.mistake(*c)
			c.Arguments = json.RawMessage(cut(string(c.Arguments), len(c.Arguments)/2))
		}
		return resp, nil
	})
}
