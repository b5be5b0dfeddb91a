// Package llm is the society's view of a language model: one call that takes
// a system prompt, a conversation and the tools on offer, and returns the
// assistant's next message.
//
// The package imports only the standard library, so that a host can adapt
// any model without importing the society. An OpenAI-compatible adapter is
// in llm/openai, and a scripted model for tests and offline examples in
// llm/llmtest.
//
// # Recording and replay
//
// A [Recorder] wraps a Model and writes each call it answers as one line of
// JSON, a [Call]: which agent asked, the how-many-th call of that agent it
// was, the request's [Skeleton] (digests of the request with its ids
// ranked, and the ids) and the response (or the error). A host saves the lines beside its store. A
// [Replayer] made from them with [Replay] answers the same calls again
// without the model, so that a society run anew on the same requirement
// reproduces the recorded run: the same organisation, messages and
// artifacts. [Fork] replays a run up to a point and then lets a live model
// answer: a different model, or the same one under new prompts.
//
// Agents call the model concurrently, so the global order of calls differs
// from run to run; each agent's calls, though, are made one after the other
// (an agent handles one message at a time). A recording is therefore keyed
// by agent and by the index of the call among that agent's calls, never by
// global order.
//
// A society names messages, tasks, requests and artifacts with random ids,
// and agents and roles with sequential ones that follow the order of spawns,
// which concurrency may change. A replayed run has other ids than the
// recorded one, and a recorded response may quote an id it read (an
// artifact reference, a request id, an agent to write to). A request is
// therefore recognised by its skeleton: the request with every id (every
// match of [IDPattern]) replaced by its rank of first appearance, so that
// two requests that differ only in their ids have the same digest. When the
// live request's skeleton is the recorded one (its conversation, the agent
// and the messages: the system prompt shows the society as it is at the
// time of the call, so it may differ; see [Replay]), the ids of the two, paired by
// rank, say which live id each recorded id stands for; the Replayer
// rewrites the recorded response with that mapping (and with every pair it
// learned from earlier calls) before it returns it. When they differ, the
// run has diverged from the recording: a replay fails with
// [ErrReplayMismatch], and a fork lets the live model answer that agent
// from then on.
//
// The same pairing identifies agents: a live agent is bound to a recorded
// one at its first call, to the recorded agent its id was paired with
// before, or else to the first recorded agent not yet bound whose first call
// has the live request's digest. Recorded and live agent ids therefore need
// not be equal.
package llm

import (
	"context"
	"encoding/json"
	"errors"
)

// Model generates the next assistant message of a conversation.
//
// Generate must be safe for concurrent use: the society calls it for many
// agents at once (up to its configured cap). It must return promptly once ctx
// is done, with an error that wraps ctx.Err(). The request and everything it
// refers to belong to the caller and must not be modified or kept after
// Generate returns; the returned Response belongs to the caller too, so a
// model must not keep or reuse it. Every ToolCall in the response has a
// non-empty ID unique within the conversation: results are matched to calls
// by it, so an adapter makes one up when its provider sends none. A
// response cut off at the model's output limit has Truncated set; one cut
// off by the provider's content filter has Truncated and Filtered set.
//
// An error means no message was produced; the society may retry. An error
// that wraps [ErrRateLimited], [ErrServer] or [ErrTimeout] is transient and
// worth retrying with backoff; one that wraps [ErrBadRequest] or [ErrAuth]
// will fail the same way again. Adapters map their transport's failures onto
// these so that callers never match strings.
type Model interface {
	Generate(ctx context.Context, req *Request) (*Response, error)
}

// ModelFunc adapts a function to a Model.
type ModelFunc func(ctx context.Context, req *Request) (*Response, error)

// Generate calls f.
func (f ModelFunc) Generate(ctx context.Context, req *Request) (*Response, error) {
	return f(ctx, req)
}

// Request is one call to a model.
type Request struct {
	// Agent is the id of the agent the call is for. Models may ignore it; a
	// scripted model uses it to choose replies.
	Agent string
	// System is the system prompt.
	System string
	// Messages is the conversation after the system prompt, oldest first.
	Messages []Message
	// Tools are the tools the model may call.
	Tools []Tool
}

// Role is the author of a message in a conversation.
type Role string

// The roles of a conversation.
const (
	RoleUser      Role = "user"      // what the agent was told: delivered messages
	RoleAssistant Role = "assistant" // what the model said, with its tool calls
	RoleTool      Role = "tool"      // the result of one tool call
)

// Message is one turn of a conversation.
type Message struct {
	Role    Role
	Content string
	// ToolCalls are the calls an assistant message makes, in order.
	ToolCalls []ToolCall
	// ToolCallID is, for a RoleTool message, the id of the call it answers.
	ToolCallID string
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage // as the model wrote them: not necessarily valid JSON
}

// Tool describes a tool the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments object.
	Parameters json.RawMessage
}

// Response is a model's answer.
type Response struct {
	Message Message // Role is RoleAssistant
	Usage   Usage
	// Truncated reports that the model stopped before it had finished:
	// because it reached its output limit (OpenAI's finish_reason
	// "length"), or, with Filtered set, because the provider's content
	// filter cut it off. The text may end mid-sentence, and the arguments of
	// the last tool call may be cut off (and so not valid JSON). A model
	// that cannot tell leaves it false.
	Truncated bool
	// Filtered reports that what cut the answer short, or withheld it, was
	// the provider's content filter (OpenAI's finish_reason
	// "content_filter"), not the output limit. Truncated is set too, so
	// that a caller that checks only Truncated does not take the answer for
	// a finished one; one that checks Filtered can tell the model why.
	Filtered bool
}

// Usage counts the tokens a call consumed. A zero Usage means the provider
// did not report it.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// The kinds of model failure. Adapters wrap them, so test with errors.Is.
var (
	// ErrRateLimited means the provider asked the caller to slow down (HTTP 429).
	ErrRateLimited = errors.New("llm: rate limited")
	// ErrServer means the provider failed (HTTP 5xx) or the connection broke.
	ErrServer = errors.New("llm: server error")
	// ErrTimeout means an attempt took longer than the adapter's own
	// per-attempt limit. When the caller's ctx ends instead, the error wraps
	// ctx.Err(), which is not transient.
	ErrTimeout = errors.New("llm: timeout")
	// ErrBadRequest means the provider refused the request as malformed (HTTP
	// 400, 404, 422): retrying the same request will not help.
	ErrBadRequest = errors.New("llm: bad request")
	// ErrAuth means the provider refused the account: its credentials
	// (HTTP 401, 403), or its use, because it is out of credit or past its
	// spending limit (OpenAI's HTTP 429 "insufficient_quota"). Retrying will
	// not help until the host fixes the key or the account.
	ErrAuth = errors.New("llm: authentication failed")
)

// IsTransient reports whether err is a failure worth retrying: rate
// limiting, a server error or a timeout. A cancelled context is not.
func IsTransient(err error) bool {
	return errors.Is(err, ErrRateLimited) || errors.Is(err, ErrServer) || errors.Is(err, ErrTimeout)
}
