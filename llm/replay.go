package llm

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"
)

// IDPattern matches the ids an agentsociety society makes: agent-N and
// role-N (sequential), task-, a- (artifacts) and req- with 16 hex digits
// (random), and msg-<8 hex digits>-N. Recorders and Replayers treat its
// matches as names that may differ between runs.
var IDPattern = regexp.MustCompile(`\b(?:(?:agent|role)-[0-9]+|(?:task|a|req)-[0-9a-f]{16}|msg-[0-9a-f]{8}-[0-9]+)\b`)

// The ways a replay fails. The errors a Replayer returns wrap them, so test
// with errors.Is; neither is transient.
var (
	// ErrReplayMismatch means the live request is not the one recorded: its
	// conversation, with its ids ranked (see [Skeleton]), differs from the
	// recorded call's, or no recorded agent not yet bound starts with it.
	// The run has diverged from the recording.
	ErrReplayMismatch = errors.New("llm: the request does not match the recording")
	// ErrReplayExhausted means the recording has no more calls for the agent
	// and the Replayer has no live model to fall through to.
	ErrReplayExhausted = errors.New("llm: the recording has no more calls for the agent")
)

// Call is one recorded model call: one line of a recording.
type Call struct {
	// Agent is the id of the agent the call was for (Request.Agent).
	Agent string
	// Index counts the agent's calls from 0, retries included.
	Index int
	// Skeleton is what the call keeps of the request.
	Skeleton
	// Response is what the model answered, or nil if it failed.
	Response *Response
	// Err is the text of the model's error, "" if it answered.
	Err string
	// ErrKind says which of the package's errors Err wrapped:
	// "rate_limited", "server", "timeout", "bad_request", "auth",
	// "canceled", "deadline_exceeded", or "" for none of them.
	ErrKind string
	// PastDeadline reports that the call failed once its context's deadline
	// had passed: the model ran out of time, which the caller may have
	// taken for a transient failure and retried. A [Replayer] replays such
	// a call by failing once the live call's deadline passes too.
	PastDeadline bool
}

// errKinds are the errors a recorded error may wrap, by the name a Call
// keeps.
var errKinds = []struct {
	name string
	err  error
}{
	{"rate_limited", ErrRateLimited}, {"server", ErrServer}, {"timeout", ErrTimeout},
	{"bad_request", ErrBadRequest}, {"auth", ErrAuth},
	{"canceled", context.Canceled}, {"deadline_exceeded", context.DeadlineExceeded},
}

// wireCall is a Call as a line of JSON. Tool call arguments are kept as
// strings, since a model may write arguments that are not valid JSON.
type wireCall struct {
	Agent     string         `json:"agent"`
	Index     int            `json:"index"`
	Digest    string         `json:"digest"`
	Conv      string         `json:"conversation"`
	IDs       []string       `json:"ids,omitempty"`
	ConvIDs   int            `json:"conversation_ids,omitempty"`
	Content   string         `json:"content,omitempty"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
	Usage     *Usage         `json:"usage,omitempty"`
	Truncated bool           `json:"truncated,omitempty"`
	Filtered  bool           `json:"filtered,omitempty"`
	Err       string         `json:"error,omitempty"`
	ErrKind   string         `json:"error_kind,omitempty"`
	Late      bool           `json:"past_deadline,omitempty"`
}

type wireToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// MarshalJSON encodes c as a line of a recording.
func (c Call) MarshalJSON() ([]byte, error) {
	w := wireCall{Agent: c.Agent, Index: c.Index, Digest: c.Digest, Conv: c.Conversation, IDs: c.IDs, ConvIDs: c.ConversationIDs, Err: c.Err, ErrKind: c.ErrKind, Late: c.PastDeadline}
	if r := c.Response; r != nil {
		w.Content, w.Truncated, w.Filtered = r.Message.Content, r.Truncated, r.Filtered
		u := r.Usage
		w.Usage = &u
		for _, tc := range r.Message.ToolCalls {
			w.ToolCalls = append(w.ToolCalls, wireToolCall{ID: tc.ID, Name: tc.Name, Arguments: string(tc.Arguments)})
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes a line of a recording.
func (c *Call) UnmarshalJSON(data []byte) error {
	var w wireCall
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*c = Call{Agent: w.Agent, Index: w.Index, Skeleton: Skeleton{Digest: w.Digest, Conversation: w.Conv, IDs: w.IDs, ConversationIDs: w.ConvIDs}, Err: w.Err, ErrKind: w.ErrKind, PastDeadline: w.Late}
	if w.Usage != nil {
		r := &Response{Message: Message{Role: RoleAssistant, Content: w.Content}, Usage: *w.Usage, Truncated: w.Truncated, Filtered: w.Filtered}
		for _, tc := range w.ToolCalls {
			r.Message.ToolCalls = append(r.Message.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Name, Arguments: json.RawMessage(tc.Arguments)})
		}
		c.Response = r
	}
	return nil
}

// Recorder is a Model that answers with another Model and records every
// call, as a line of JSON (a [Call]) written to its writer. It is safe for
// concurrent use; the writer need not be, since lines are written one at a
// time. Lines are written in the order calls end, which is not the order of
// any one run: [ReadRecording] sorts them.
type Recorder struct {
	model Model

	mu   sync.Mutex
	w    io.Writer
	next map[string]int // the index of each agent's next call
	err  error          // the first write error
}

// Record returns a Recorder that answers with m and writes the calls to w.
func Record(m Model, w io.Writer) *Recorder {
	return &Recorder{model: m, w: w, next: map[string]int{}}
}

// Generate calls the recorded model and records the call, failed or not.
// A line that cannot be written is not retried: Err reports it, and the
// model's answer is returned all the same. A model that panics is recorded
// as failed ("the model panicked: ..."), and the panic goes on to the
// caller: the call took its index, and a recording without it could not be
// read. A nil request is refused with ErrBadRequest, unrecorded.
func (r *Recorder) Generate(ctx context.Context, req *Request) (*Response, error) {
	if req == nil {
		return nil, fmt.Errorf("llm: record: nil request: %w", ErrBadRequest)
	}
	sk := SkeletonOf(req)
	r.mu.Lock()
	index := r.next[req.Agent]
	r.next[req.Agent]++
	r.mu.Unlock()
	c := Call{Agent: req.Agent, Index: index, Skeleton: sk}
	returned := false
	defer func() {
		if returned {
			return
		}
		p := recover()
		if p == nil { // runtime.Goexit: let it go on
			c.Err = "the model call did not return"
			r.write(c)
			return
		}
		c.Err = fmt.Sprintf("the model panicked: %v", p)
		r.write(c)
		panic(p)
	}()
	resp, err := r.model.Generate(ctx, req)
	returned = true
	if err != nil {
		c.Err = err.Error()
		c.PastDeadline = errors.Is(ctx.Err(), context.DeadlineExceeded)
		for _, k := range errKinds {
			if errors.Is(err, k.err) {
				c.ErrKind = k.name
				break
			}
		}
	} else if resp == nil {
		c.Err = "the model returned no response"
	} else {
		c.Response = resp
	}
	r.write(c)
	return resp, err
}

// write writes c as a line, or keeps the first error doing so for Err.
func (r *Recorder) write(c Call) {
	line, merr := json.Marshal(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	if merr == nil {
		_, merr = r.w.Write(append(line, '\n'))
	}
	if merr != nil && r.err == nil {
		r.err = fmt.Errorf("llm: recording call %d of %s: %w", c.Index, c.Agent, merr)
	}
}

// Err returns the first error writing the recording, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Skeleton is what a recording keeps of a request to recognise it: digests
// of the request with its ids ranked, and the ids.
//
// The skeleton of a request is the request with each id (each match of
// [IDPattern]) replaced by its rank of first appearance: two requests that
// differ only in their ids, consistently, have the same skeleton. The
// agent and the messages (role, content, tool calls, tool call id) come
// first, then the system prompt and the tools (name, description,
// parameters).
type Skeleton struct {
	// Digest is the hex SHA-256 of the whole skeleton.
	Digest string
	// Conversation is the hex SHA-256 of the skeleton's agent and messages
	// only: what a [Replayer] matches (see [Replay]).
	Conversation string
	// IDs are the ids of the request, in order of first appearance: the
	// skeleton names each by its index here.
	IDs []string
	// ConversationIDs counts the ids the agent and the messages mention:
	// they are the first of IDs.
	ConversationIDs int
}

// SkeletonOf returns the skeleton of req.
func SkeletonOf(req *Request) Skeleton {
	d := digester{rank: map[string]int{}}
	h := sha256.New()
	field := func(s string) {
		d.buf = d.skeleton(d.buf[:0], s)
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(d.buf)))])
		h.Write(d.buf)
	}
	field(req.Agent)
	field(strconv.Itoa(len(req.Messages)))
	for _, m := range req.Messages {
		field(string(m.Role))
		field(m.Content)
		field(m.ToolCallID)
		field(strconv.Itoa(len(m.ToolCalls)))
		for _, c := range m.ToolCalls {
			field(c.ID)
			field(c.Name)
			field(string(c.Arguments))
		}
	}
	conv := h.Sum(nil)
	sk := Skeleton{Conversation: hex.EncodeToString(conv), ConversationIDs: len(d.ids)}
	field(req.System)
	field(strconv.Itoa(len(req.Tools)))
	for _, t := range req.Tools {
		field(t.Name)
		field(t.Description)
		field(string(t.Parameters))
	}
	sk.Digest, sk.IDs = hex.EncodeToString(h.Sum(nil)), d.ids
	return sk
}

// digester ranks the ids of a request as SkeletonOf meets them.
type digester struct {
	rank map[string]int
	ids  []string
	buf  []byte
}

// skeleton appends s to buf with each id replaced by \x00rank\x00.
func (d *digester) skeleton(buf []byte, s string) []byte {
	last := 0
	for _, loc := range IDPattern.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		r, ok := d.rank[id]
		if !ok {
			r = len(d.ids)
			d.rank[id] = r
			d.ids = append(d.ids, id)
		}
		buf = append(buf, s[last:loc[0]]...)
		buf = append(buf, 0)
		buf = strconv.AppendInt(buf, int64(r), 10)
		buf = append(buf, 0)
		last = loc[1]
	}
	return append(buf, s[last:]...)
}

// Recording is a recorded run: each agent's calls, in order. It is read
// only once made, so one Recording may serve many Replayers.
type Recording struct {
	calls  map[string][]Call
	agents []string // in order of their first call's line
}

// ReadRecording reads the lines a [Recorder] wrote. Each agent's calls must
// be numbered from 0 without a gap or a repeat; lines may come in any order.
func ReadRecording(r io.Reader) (*Recording, error) {
	rec := &Recording{calls: map[string][]Call{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<30)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c Call
		if err := json.Unmarshal(line, &c); err != nil {
			return nil, fmt.Errorf("llm: line %d of the recording: %w", n, err)
		}
		if c.ConversationIDs < 0 || c.ConversationIDs > len(c.IDs) {
			return nil, fmt.Errorf("llm: line %d of the recording: call %d of %s counts %d ids in its conversation, of %d in all",
				n, c.Index, c.Agent, c.ConversationIDs, len(c.IDs))
		}
		if _, ok := rec.calls[c.Agent]; !ok {
			rec.agents = append(rec.agents, c.Agent)
		}
		rec.calls[c.Agent] = append(rec.calls[c.Agent], c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("llm: reading the recording: %w", err)
	}
	for agent, calls := range rec.calls {
		slices.SortFunc(calls, func(a, b Call) int { return cmp.Compare(a.Index, b.Index) })
		for i, c := range calls {
			if c.Index != i {
				return nil, fmt.Errorf("llm: the recording has call %d of %s where call %d should be", c.Index, agent, i)
			}
		}
	}
	return rec, nil
}

// Agents returns the ids of the recorded agents, in the order their first
// calls ended.
func (r *Recording) Agents() []string { return slices.Clone(r.agents) }

// Calls returns agent's recorded calls, in order.
func (r *Recording) Calls(agent string) []Call { return slices.Clone(r.calls[agent]) }

// Len returns the number of calls recorded.
func (r *Recording) Len() int {
	n := 0
	for _, c := range r.calls {
		n += len(c)
	}
	return n
}

// Replayer is a Model that answers from a [Recording]; see [Replay] and
// [Fork]. It is safe for concurrent use.
type Replayer struct {
	rec   *Recording
	live  Model          // nil for a pure replay
	limit map[string]int // nil: replay every recorded call

	mu       sync.Mutex
	agents   map[string]*replayed // by live agent id
	bound    map[string]bool      // recorded agents bound to a live one
	ids      map[string]string    // recorded id -> live id
	liveIDs  map[string]string    // live id -> recorded id
	replayed int
}

// replayed is where a live agent is in the recording.
type replayed struct {
	recorded string // "" when the agent has none: it is live
	next     int    // the index of its next recorded call
	diverged bool   // a fork's agent whose request no longer matched
}

// Replay returns a Model that answers each call from rec, as described in
// the package's section on recording, and fails with [ErrReplayMismatch]
// when a request does not match its recorded call and with
// [ErrReplayExhausted] when an agent has used all its recorded calls.
//
// A request matches its recorded call when their conversations (the agent
// and the messages: [Skeleton].Conversation) match; the system prompt and
// the tools may differ. They must be allowed to: an agent's system prompt
// shows the society as it is when the call is made (its contacts, which of
// its children reported, what it may still spend), and so depends on how
// the agents interleaved; an agent that a queued message is from is
// already a contact, though the message is not yet in the conversation.
// The conversation is what the agent was told and did, one message at a
// time, and is the same in every run that gives the same answers. The ids
// of the two requests are paired over the conversation, or over the whole
// requests when these match too.
func Replay(rec *Recording) *Replayer {
	return &Replayer{rec: rec, agents: map[string]*replayed{}, bound: map[string]bool{}, ids: map[string]string{}, liveIDs: map[string]string{}}
}

// Fork returns a Model that replays rec up to a point and then lets live
// answer. Since requests are matched on their conversation, a fork may run
// under other prompts (Config.Prompts): the recorded answers are replayed
// under the new prompts, which the live calls after the point are made
// with. upTo says, by recorded agent id, how many of each agent's
// recorded calls to replay (see agentsociety.ModelCallsUpTo, which counts
// them from the recorded run's events up to a chosen event); an agent it
// does not name replays none, and a nil upTo replays every recorded call.
//
// Each live agent goes live on its own: after its share of recorded calls,
// at its first call if it has no recorded counterpart, and at the first
// call that does not match its recorded one (live calls of other agents may
// have told it something the recorded run did not), after which it stays
// live. Requests go to live exactly as the society made them.
func Fork(rec *Recording, live Model, upTo map[string]int) *Replayer {
	r := Replay(rec)
	r.live = live
	if upTo != nil {
		r.limit = maps.Clone(upTo)
	}
	return r
}

// Replayed returns how many calls were answered from the recording.
func (r *Replayer) Replayed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replayed
}

// Generate answers req from the recording, or, for a Fork past its point,
// with the live model. A call recorded as failed past its deadline
// ([Call].PastDeadline) fails again once ctx's deadline passes (at once if
// ctx has none), so that the caller sees what it saw when recording: a
// call that ran out of time.
func (r *Replayer) Generate(ctx context.Context, req *Request) (*Response, error) {
	if req == nil {
		return nil, fmt.Errorf("llm: replay: nil request: %w", ErrBadRequest)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("llm: replay: %w", err)
	}
	resp, goLive, err := r.answer(req.Agent, SkeletonOf(req))
	if goLive {
		return r.live.Generate(ctx, req)
	}
	if re := (replayedError{}); errors.As(err, &re) && re.late {
		if _, ok := ctx.Deadline(); ok {
			<-ctx.Done()
			re.ctx = ctx.Err()
			return nil, re
		}
	}
	return resp, err
}

// answer finds the recorded call for a live request and returns its answer
// rewritten with the live ids, or goLive when the live model answers it.
func (r *Replayer) answer(agent string, sk Skeleton) (resp *Response, goLive bool, err error) {
	digest, ids := sk.Conversation, sk.IDs[:sk.ConversationIDs]
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[agent]
	if a == nil {
		a = &replayed{recorded: r.bind(agent, digest)}
		if a.recorded != "" {
			r.bound[a.recorded] = true
			r.learn(a.recorded, agent)
		}
		r.agents[agent] = a
	}
	if a.recorded == "" {
		if r.live != nil {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("%w: no recorded agent that is not yet replayed starts with the first request of %s (conversation %.12s)", ErrReplayMismatch, agent, digest)
	}
	calls := r.rec.calls[a.recorded]
	if a.diverged || a.next >= len(calls) || r.limit != nil && a.next >= r.limit[a.recorded] {
		if r.live != nil {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("%w: %s (recorded as %s) made call %d; %d were recorded", ErrReplayExhausted, agent, a.recorded, a.next, len(calls))
	}
	c := calls[a.next]
	// The ids are paired over the conversation, or over the whole requests
	// when these match too. ReadRecording checked ConversationIDs.
	old := c.IDs[:c.ConversationIDs]
	if c.Digest == sk.Digest {
		old, ids = c.IDs, sk.IDs
	}
	var why string
	switch {
	case c.Conversation != digest:
		why = fmt.Sprintf("has the conversation %.12s; the recording has %.12s", digest, c.Conversation)
	case len(old) != len(ids):
		// Equal skeletons have as many ids: the recording's list was damaged.
		why = fmt.Sprintf("mentions %d ids; the recording lists %d for the same request", len(ids), len(old))
	}
	if why != "" {
		if r.live != nil {
			a.diverged = true
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("%w: call %d of %s (recorded as %s) %s", ErrReplayMismatch, a.next, agent, a.recorded, why)
	}
	a.next++
	r.replayed++
	pairs := make(map[string]string, len(ids))
	for i, now := range ids {
		pairs[old[i]] = now
		r.learn(old[i], now)
	}
	if c.Response == nil {
		return nil, false, replayedError{text: c.Err, kind: c.ErrKind, late: c.PastDeadline}
	}
	return r.rewrite(c.Response, pairs), false, nil
}

// bind returns the recorded agent a live agent making its first call, with
// a request of digest, replays: the one its id was paired with, or the one
// of the same id, or the first other not yet bound whose first call has
// the digest; "" if there is none. Called with r.mu held.
func (r *Replayer) bind(agent, digest string) string {
	fits := func(rec string) bool {
		calls := r.rec.calls[rec]
		if r.bound[rec] || len(calls) == 0 || r.limit != nil && r.limit[rec] == 0 {
			return false
		}
		return calls[0].Conversation == digest
	}
	if rec, ok := r.liveIDs[agent]; ok && fits(rec) {
		return rec
	}
	if _, taken := r.liveIDs[agent]; !taken && fits(agent) {
		return agent
	}
	for _, rec := range r.rec.agents {
		if fits(rec) {
			return rec
		}
	}
	return ""
}

// learn notes that recorded id old is live id now. Called with r.mu held.
func (r *Replayer) learn(old, now string) {
	r.ids[old] = now
	r.liveIDs[now] = old
}

// rewrite returns a copy of resp with each recorded id replaced by its live
// id: the pair of this call if it has one, else the one learned before. An
// id never paired stays as it was. Called with r.mu held.
func (r *Replayer) rewrite(resp *Response, pairs map[string]string) *Response {
	swap := func(s string) string {
		return IDPattern.ReplaceAllStringFunc(s, func(id string) string {
			if now, ok := pairs[id]; ok {
				return now
			}
			if now, ok := r.ids[id]; ok {
				return now
			}
			return id
		})
	}
	out := *resp
	out.Message.Role = RoleAssistant
	out.Message.Content = swap(resp.Message.Content)
	out.Message.ToolCalls = make([]ToolCall, len(resp.Message.ToolCalls))
	for i, c := range resp.Message.ToolCalls {
		c.Arguments = json.RawMessage(swap(string(c.Arguments)))
		out.Message.ToolCalls[i] = c
	}
	if len(out.Message.ToolCalls) == 0 {
		out.Message.ToolCalls = nil
	}
	return &out
}

// replayedError is a recorded model error, given again: its text, wrapping
// the error it wrapped when recorded and, for a call replayed past its
// deadline, the live context's error.
type replayedError struct {
	text, kind string
	late       bool  // the call was recorded as failed past its deadline
	ctx        error // the live context's error, when the replay waited for it
}

func (e replayedError) Error() string { return e.text }

func (e replayedError) Unwrap() []error {
	var errs []error
	for _, k := range errKinds {
		if k.name == e.kind {
			errs = append(errs, k.err)
			break
		}
	}
	if e.ctx != nil {
		errs = append(errs, e.ctx)
	}
	return errs
}
