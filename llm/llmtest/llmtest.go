// Package llmtest provides a scripted [llm.Model] for tests and offline
// examples.
//
// A real model is slow, costs money and never says the same thing twice, so
// a test that drives agents through it can neither be exact nor run offline.
// A [Model] instead answers from a script: an ordered list of [Rule]s, each
// of which matches requests by what they contain (the agent, its system
// prompt, the last message, the tool whose result came back) and gives the
// reply. A script therefore describes what each agent does in each situation
// rather than the order in which agents happen to call the model, which a
// concurrent society does not fix.
//
// The Model records every request, so a test can assert on the exact context
// an agent was given, and it can fail on demand ([Model.FailNext],
// [Rule.Err]) and be slow on demand ([Model.Delay]), so a test can check how
// the caller copes with failures, cancellation and its own concurrency cap
// ([Model.MaxInFlight]).
//
// Everything a Model produces is determined by the script and the order of
// the calls: the replies, the tool call ids it fills in and the token usage
// it reports.
package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"agentsociety/llm"
)

// ErrNoRule is wrapped by the error Generate returns when no rule answers a
// request and the Model has no Fallback. The error names the agent and
// quotes the last message, and any rule that matched but had used up its
// Times, so that a failing test says which step of the script is missing.
var ErrNoRule = errors.New("llmtest: no rule matches the request")

// A Rule is one step of a script: which requests it answers and how.
//
// The matchers (Agent, SystemContains, LastContains, AfterTool and When) are
// all optional; a rule matches a request when every matcher it sets does, so
// a rule that sets none matches every request and serves as a catch-all at
// the end of a script. Exactly one of Reply, Response and Err must be set.
type Rule struct {
	// Name identifies the rule in errors. A rule without a name is called by
	// its position among the arguments of New, from rule[0].
	Name string

	// Agent, if not empty, matches requests whose Agent equals it.
	Agent string
	// SystemContains, if not empty, matches requests whose system prompt
	// contains it. It is how a rule targets every agent of a role: agent ids
	// are assigned at run time, but a role's name and prompt appear in the
	// system prompt of each of its agents.
	SystemContains string
	// LastContains, if not empty, matches requests whose last message's
	// Content contains it. A request without messages does not match.
	LastContains string
	// AfterTool, if not empty, matches requests whose last message is the
	// result (RoleTool) of a call to the tool of this name, so that a script
	// can say what an agent does with each tool's answer. The call is found
	// by looking up the result's ToolCallID among the ToolCalls of the
	// earlier assistant messages; a result whose id answers no call in the
	// request does not match.
	AfterTool string
	// When, if not nil, matches requests for which it reports true. It is
	// for what the other matchers cannot say, such as the number of messages.
	// Rules are matched one call at a time, so When needs no locking of its
	// own; for the same reason it must return promptly and must not call
	// Generate. It is given the Model's copy of the request, never the
	// caller's; the bytes of its tools' Parameters are the Model's record
	// of them: read them, do not change them.
	When func(req *llm.Request) bool

	// Times is how many times the rule may answer; 0 means without limit.
	// A rule that has used up its Times is skipped, so that a later rule with
	// the same matchers takes over: how a script says "first this, then
	// that".
	Times int

	// Reply, if not nil, computes the reply when the rule answers, for
	// replies that depend on the request. It is called outside the Model's
	// locks, so it may block (to hold calls in flight) and may call the
	// Model's other methods. It is given the same copy of the request as
	// When. Its response is copied and completed as described at
	// [Model.Generate]; an error it returns is wrapped.
	Reply func(req *llm.Request) (*llm.Response, error)
	// Response, if not nil, is the reply. It is copied each time the rule
	// answers, so one Response may serve many calls and later changes by the
	// caller to a reply it received do not leak into the next one.
	Response *llm.Response
	// Err, if not nil, makes the call fail with an error that wraps it, so
	// that a script can put a failure at an exact step of a conversation.
	Err error
}

// label names the rule in errors.
func (r *Rule) label(i int) string {
	if r.Name != "" {
		return fmt.Sprintf("rule %q", r.Name)
	}
	return fmt.Sprintf("rule[%d]", i)
}

// matches reports whether every matcher r sets accepts req.
func (r *Rule) matches(req *llm.Request) bool {
	if r.Agent != "" && req.Agent != r.Agent {
		return false
	}
	if r.SystemContains != "" && !strings.Contains(req.System, r.SystemContains) {
		return false
	}
	if r.LastContains != "" {
		if len(req.Messages) == 0 || !strings.Contains(req.Messages[len(req.Messages)-1].Content, r.LastContains) {
			return false
		}
	}
	if r.AfterTool != "" {
		if name, ok := answeredTool(req); !ok || name != r.AfterTool {
			return false
		}
	}
	if r.When != nil && !r.When(req) {
		return false
	}
	return true
}

// answeredTool returns the name of the tool whose call the last message of
// req answers, searching the assistant messages from the newest back, as a
// provider resolves a tool result.
func answeredTool(req *llm.Request) (string, bool) {
	n := len(req.Messages)
	if n == 0 || req.Messages[n-1].Role != llm.RoleTool {
		return "", false
	}
	id := req.Messages[n-1].ToolCallID
	for i := n - 2; i >= 0; i-- {
		msg := &req.Messages[i]
		if msg.Role != llm.RoleAssistant {
			continue
		}
		for _, c := range msg.ToolCalls {
			if c.ID == id {
				return c.Name, true
			}
		}
	}
	return "", false
}

// A Model is a scripted [llm.Model]. Create one with [New]; the zero Model
// has no rules, so it answers only through its Fallback.
//
// A Model is safe for concurrent use, as the society requires of every
// model. Set Fallback and Delay before the first call to Generate and do not
// change them while calls may be running.
type Model struct {
	// Fallback, if not nil, answers the requests no rule answers, in the
	// same way as [Rule.Reply], and is given the same copy of the request. Without it such a request fails with
	// [ErrNoRule], which is usually what a test wants: an unscripted call is
	// a bug in the test or in the code under test.
	Fallback func(req *llm.Request) (*llm.Response, error)
	// Delay, if positive, is how long every call takes before it answers or
	// fails, as a provider's latency would. It gives concurrent calls time to
	// overlap, for [Model.MaxInFlight], and gives timeouts and cancellation
	// something to interrupt: a call whose ctx ends during its Delay returns
	// at once with an error that wraps ctx.Err().
	Delay time.Duration

	// script is held while a call is recorded and its reply chosen, so that
	// replies, Times and FailNext are consumed in the order of the record.
	script sync.Mutex
	rules  []Rule
	fired  []int // per rule, how many times it has answered

	mu          sync.Mutex // guards the fields below
	requests    []llm.Request
	tools       []llm.Tool // the last request's tools, shared by the requests that repeat them
	failures    []failure
	lastID      int
	inFlight    int
	maxInFlight int
}

// failure is a run of FailNext failures still to come.
type failure struct {
	n   int
	err error
}

var _ llm.Model = (*Model)(nil)

// New returns a Model that answers by the given rules, tried in order.
//
// New panics if a rule sets none or more than one of Reply, Response and
// Err, or has a negative Times: a script is written by the test's author, and
// a mistake in it should stop the test where it was made rather than surface
// later as a puzzling reply.
func New(rules ...Rule) *Model {
	for i := range rules {
		r := &rules[i]
		n := 0
		if r.Reply != nil {
			n++
		}
		if r.Response != nil {
			n++
		}
		if r.Err != nil {
			n++
		}
		if n != 1 {
			panic(fmt.Sprintf("llmtest.New: %s sets %d of Reply, Response and Err; it must set exactly one", r.label(i), n))
		}
		if r.Times < 0 {
			panic(fmt.Sprintf("llmtest.New: %s has negative Times %d", r.label(i), r.Times))
		}
	}
	return &Model{rules: slices.Clone(rules), fired: make([]int, len(rules))}
}

// Generate records req and answers it by the script.
//
// A call proceeds in this order:
//
//  1. The request is recorded, whatever the call's outcome.
//  2. If ctx is already done, the call fails with an error wrapping
//     ctx.Err(), consuming nothing.
//  3. The reply is chosen: a failure queued by [Model.FailNext] if there is
//     one, else the first rule that matches and has not used up its Times,
//     else Fallback, else an error wrapping [ErrNoRule]. Choices are made one
//     call at a time, in the order of the record, so concurrent calls never
//     share a rule's last use.
//  4. Delay is served; if ctx ends first, the call fails with an error
//     wrapping ctx.Err(). The choice stays consumed, as a provider that was
//     sent the request has spent it.
//  5. The reply is produced (Reply or Fallback is called now) and
//     completed: an empty Role becomes RoleAssistant; each tool call
//     without an ID gets the Model's next id ("call_1", "call_2", ...), so
//     that ids are unique across the Model's replies even when one static
//     Response is used many times; and a zero Usage is replaced by an
//     estimate, so that callers can test their accounting of usage.
//
// The estimate is InputTokens = n/4, where n is the length in bytes of the
// system prompt plus, for every message, its Content and the Name and
// Arguments of its tool calls; and OutputTokens = the same measure of the
// reply message, divided by 4. A Usage set by the script is kept.
//
// Rules and Fallback see a copy of req, never the caller's request. A nil
// req fails with an error wrapping [llm.ErrBadRequest] and is not recorded.
func (m *Model) Generate(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if req == nil {
		return nil, fmt.Errorf("llmtest: nil request: %w", llm.ErrBadRequest)
	}
	m.mu.Lock()
	m.inFlight++
	m.maxInFlight = max(m.maxInFlight, m.inFlight)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.inFlight--
		m.mu.Unlock()
	}()

	m.script.Lock()
	m.mu.Lock()
	if !sameTools(m.tools, req.Tools) {
		m.tools = copyTools(req.Tools)
	}
	rec, work := copyRequest(req, m.tools), copyRequest(req, slices.Clone(m.tools))
	m.requests = append(m.requests, *rec)
	m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		m.script.Unlock()
		return nil, fmt.Errorf("llmtest: %w", err)
	}
	c := m.choose(work)
	m.script.Unlock()

	if m.Delay > 0 {
		t := time.NewTimer(m.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("llmtest: %w", ctx.Err())
		}
	}

	if c.err != nil {
		return nil, c.err
	}
	resp := c.resp
	if c.reply != nil {
		r, err := c.reply(work)
		if err != nil {
			return nil, fmt.Errorf("llmtest: %s: %w", c.label(), err)
		}
		if r == nil {
			return nil, fmt.Errorf("llmtest: %s returned neither a response nor an error", c.label())
		}
		resp = copyResponse(r)
	}
	m.complete(work, resp)
	return resp, nil
}

// choice is the reply chosen for a call: an error, a copied static
// response, or a function to call for it, with the rule that chose it
// (nil for Fallback), which errors name.
type choice struct {
	rule  *Rule
	index int
	err   error
	resp  *llm.Response
	reply func(*llm.Request) (*llm.Response, error)
}

// label names what chose c in errors: its rule, or Fallback. It is worked
// out only for an error, not for every call.
func (c *choice) label() string {
	if c.rule == nil {
		return "Fallback"
	}
	return c.rule.label(c.index)
}

// choose consumes and returns the reply for req. The caller holds m.script.
func (m *Model) choose(req *llm.Request) choice {
	m.mu.Lock()
	if len(m.failures) > 0 {
		f := &m.failures[0]
		err := f.err
		if f.n--; f.n == 0 {
			m.failures = m.failures[1:]
		}
		m.mu.Unlock()
		return choice{err: fmt.Errorf("llmtest: FailNext: %w", err)}
	}
	m.mu.Unlock()

	var usedUp []string
	for i := range m.rules {
		r := &m.rules[i]
		if !r.matches(req) {
			continue
		}
		if r.Times > 0 && m.fired[i] >= r.Times {
			usedUp = append(usedUp, fmt.Sprintf("%s (Times %d)", r.label(i), r.Times))
			continue
		}
		m.fired[i]++
		switch {
		case r.Err != nil:
			return choice{err: fmt.Errorf("llmtest: %s: %w", r.label(i), r.Err)}
		case r.Reply != nil:
			return choice{rule: r, index: i, reply: r.Reply}
		default:
			return choice{rule: r, index: i, resp: copyResponse(r.Response)}
		}
	}
	if m.Fallback != nil {
		return choice{reply: m.Fallback}
	}
	return choice{err: noRule(req, usedUp)}
}

// noRule describes a request no rule answered, in the terms a script's
// author needs to write the missing rule.
func noRule(req *llm.Request, usedUp []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "agent %q", req.Agent)
	if n := len(req.Messages); n == 0 {
		b.WriteString(", no messages")
	} else {
		last := &req.Messages[n-1]
		fmt.Fprintf(&b, ", last message (%s", last.Role)
		if last.Role == llm.RoleTool {
			if name, ok := answeredTool(req); ok {
				fmt.Fprintf(&b, " result of %s", name)
			} else {
				b.WriteString(" result of an unknown call")
			}
			fmt.Fprintf(&b, " %q", last.ToolCallID)
		}
		for i, c := range last.ToolCalls {
			if i == 0 {
				b.WriteString(" calling ")
			} else {
				b.WriteString(", ")
			}
			b.WriteString(c.Name)
		}
		fmt.Fprintf(&b, ") %q", clip(last.Content, 200))
	}
	if len(usedUp) > 0 {
		fmt.Fprintf(&b, "; matching but used up: %s", strings.Join(usedUp, ", "))
	}
	return fmt.Errorf("%w: %s", ErrNoRule, b.String())
}

// clip shortens s to at most n bytes, on a rune boundary, marking the cut,
// so that an error quoting a long message stays readable.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// complete fills in what a scripted reply leaves out.
func (m *Model) complete(req *llm.Request, resp *llm.Response) {
	if resp.Message.Role == "" {
		resp.Message.Role = llm.RoleAssistant
	}
	for i := range resp.Message.ToolCalls {
		if resp.Message.ToolCalls[i].ID == "" {
			m.mu.Lock()
			m.lastID++
			id := m.lastID
			m.mu.Unlock()
			resp.Message.ToolCalls[i].ID = "call_" + strconv.Itoa(id)
		}
	}
	if resp.Usage == (llm.Usage{}) {
		in := len(req.System)
		for i := range req.Messages {
			in += size(&req.Messages[i])
		}
		resp.Usage = llm.Usage{InputTokens: in / 4, OutputTokens: size(&resp.Message) / 4}
	}
}

// size is the length of a message for the usage estimate.
func size(msg *llm.Message) int {
	n := len(msg.Content)
	for _, c := range msg.ToolCalls {
		n += len(c.Name) + len(c.Arguments)
	}
	return n
}

// FailNext makes the next n calls to Generate, from any agent, fail with an
// error that wraps err, before any rule is consulted; a nil err means
// [llm.ErrServer], the commonest transient failure. It is for testing
// retries and error paths without rewriting the script. The failing calls
// are recorded like any other. Failures queue: after FailNext(1, a) and
// FailNext(2, b) the next call fails with a and the two after it with b.
// An n of zero or less queues nothing.
func (m *Model) FailNext(n int, err error) {
	if n <= 0 {
		return
	}
	if err == nil {
		err = llm.ErrServer
	}
	m.mu.Lock()
	m.failures = append(m.failures, failure{n: n, err: err})
	m.mu.Unlock()
}

// Requests returns a copy of every request Generate has received, in the
// order the calls arrived. The copies are deep: neither the caller's later
// changes to its requests nor changes to the returned slice alter the
// record.
func (m *Model) Requests() []llm.Request {
	return m.recorded(func(*llm.Request) bool { return true })
}

// RequestsFor returns a copy of the requests Generate has received for the
// given agent, in the order the calls arrived, as [Model.Requests] does.
// It is how a test checks the context one agent was given among the calls
// of many.
func (m *Model) RequestsFor(agent string) []llm.Request {
	return m.recorded(func(r *llm.Request) bool { return r.Agent == agent })
}

// recorded returns deep copies of the recorded requests that keep accepts.
// A recorded request is never changed once appended, so the copying, which
// grows with the length of the conversations, is done outside the lock
// rather than stalling every Generate.
func (m *Model) recorded(keep func(*llm.Request) bool) []llm.Request {
	m.mu.Lock()
	reqs := m.requests[:len(m.requests):len(m.requests)]
	m.mu.Unlock()
	var out []llm.Request
	for i := range reqs {
		if keep(&reqs[i]) {
			out = append(out, *copyRequest(&reqs[i], copyTools(reqs[i].Tools)))
		}
	}
	return out
}

// Calls returns the number of requests recorded: every call to Generate
// with a non-nil request, whatever its outcome.
func (m *Model) Calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

// MaxInFlight returns the largest number of calls to Generate that have
// been running at the same time, so that a test can check a caller's
// concurrency cap. Give the Model a Delay, or a Reply that blocks, so that
// calls overlap long enough to be counted together.
func (m *Model) MaxInFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxInFlight
}

// Say returns a reply of assistant text without tool calls: an agent's final
// answer.
func Say(text string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: text}}
}

// Call returns a reply that calls one tool, with an empty ID for the Model
// to fill in.
//
// The arguments are args marshalled by json.Marshal, except that a
// json.RawMessage, []byte or string is taken to be JSON text already and
// used as it is, valid or not, so that a script can also feed a caller
// malformed arguments; and nil stands for no arguments, "{}". Call panics
// if json.Marshal fails, since the script is then wrong.
func Call(name string, args any) *llm.Response {
	var raw json.RawMessage
	switch a := args.(type) {
	case nil:
		raw = json.RawMessage("{}")
	case json.RawMessage:
		raw = bytes.Clone(a)
	case []byte:
		raw = bytes.Clone(a)
	case string:
		raw = json.RawMessage(a)
	default:
		b, err := json.Marshal(args)
		if err != nil {
			panic(fmt.Sprintf("llmtest.Call(%q): %v", name, err))
		}
		raw = b
	}
	return Calls(llm.ToolCall{Name: name, Arguments: raw})
}

// Calls returns a reply that calls the given tools, in order, as a model
// may in one turn. Calls with an empty ID get one from the Model each time
// the reply is used.
func Calls(calls ...llm.ToolCall) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: copyCalls(calls)}}
}

// copyRequest returns a deep copy of r with tools, a deep copy of
// r.Tools, as its tools, preserving nil slices so that the copy compares
// equal to the original.
func copyRequest(r *llm.Request, tools []llm.Tool) *llm.Request {
	c := *r
	if r.Messages != nil {
		c.Messages = make([]llm.Message, len(r.Messages))
		for i, msg := range r.Messages {
			msg.ToolCalls = copyCalls(msg.ToolCalls)
			c.Messages[i] = msg
		}
	}
	c.Tools = tools
	return &c
}

// copyTools returns a deep copy of tools, nil for nil.
func copyTools(tools []llm.Tool) []llm.Tool {
	if tools == nil {
		return nil
	}
	c := make([]llm.Tool, len(tools))
	for i, t := range tools {
		t.Parameters = bytes.Clone(t.Parameters)
		c[i] = t
	}
	return c
}

// sameTools reports whether a and b hold the same tools, nil and empty
// told apart: an agent sends the same tools on every call, so the Model
// keeps one copy of them for all the calls that repeat them.
func sameTools(a, b []llm.Tool) bool {
	return (a == nil) == (b == nil) && slices.EqualFunc(a, b, func(x, y llm.Tool) bool {
		return x.Name == y.Name && x.Description == y.Description &&
			(x.Parameters == nil) == (y.Parameters == nil) && bytes.Equal(x.Parameters, y.Parameters)
	})
}

// copyResponse returns a deep copy of r.
func copyResponse(r *llm.Response) *llm.Response {
	c := *r
	c.Message.ToolCalls = copyCalls(r.Message.ToolCalls)
	return &c
}

func copyCalls(calls []llm.ToolCall) []llm.ToolCall {
	if calls == nil {
		return nil
	}
	c := make([]llm.ToolCall, len(calls))
	for i, call := range calls {
		call.Arguments = bytes.Clone(call.Arguments)
		c[i] = call
	}
	return c
}
